"""Per-class job metrics as the dashboard reads them: processed, failed, total and mean time
per job class over a period, and an execution-time histogram, from the keys Sidekiq 7+ keeps
(``j|...`` hashes per minute, ``h|...`` BITFIELD histograms per minute). Sidekiq's own
processes and queued's masters write the same keys, so both show up here.

Read-only, and bounded: a period is at most 72 hours, read as at most 480 minute hashes (the
last 8 hours, their TTL) or 432 ten-minute hashes, in one pipeline whatever the number of
classes; a histogram is at most 480 BITFIELD_RO reads, in one pipeline.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import redis as redis_lib

from .. import metricskeys
from ..keys import Keys
from ..metricskeys import FIELD_FAILED, FIELD_MS, FIELD_PROCESSED, histogram_key, minute_key, \
    rollup_key
from .names import name_of, to_key

# --- the layout ---------------------------------------------------------------------------------
# Sidekiq 8's layout, from queued/metricskeys.py (the daemon writes it, and Sidekiq 7's beside it):
# minute hashes "j|%y%m%d|%-H:%M" (UTC, TTL 8 h) with fields "<Class>|p", "|f", "|ms" (time of
# successes only), ten-minute rollups named by the minute key without its last digit (TTL 3
# days), histograms "h|<Class>-%-d-%-H:%-M" of 26 u16 counters, bucket i counting runs shorter
# than BUCKETS[i] ms (the last, "Slow", everything longer).
BUCKETS = metricskeys.BUCKETS[:-1]  # the finite bounds
LABELS = metricskeys.BUCKET_LABELS
MINUTE_TTL_HOURS = metricskeys.MINUTE_TTL // 3600  # minute hashes and histograms live this long
MAX_HOURS = metricskeys.ROLLUP_TTL // 3600  # the longest period (ten-minute rollups live 3 days)
_FETCH = metricskeys.histogram_fetch_args()


# --- what is read -------------------------------------------------------------------------------

@dataclass
class ClassMetrics:
    klass: str
    processed: int = 0
    failed: int = 0
    ms: int = 0

    @property
    def succeeded(self) -> int:
        return max(self.processed - self.failed, 0)

    @property
    def mean_ms(self) -> float:
        """Mean time of a success (Sidekiq times successes only)."""
        return self.ms / self.succeeded if self.succeeded else 0.0

    def add(self, metric: str, value: int) -> None:
        if metric == FIELD_PROCESSED:
            self.processed += value
        elif metric == FIELD_FAILED:
            self.failed += value
        elif metric == FIELD_MS:
            self.ms += value


@dataclass
class Period:
    """What a period was read from: ``step`` seconds per hash (60 or 600), its start and end,
    and whether older data than the minute hashes keep was asked for but only they had it."""
    hours: int
    step: int
    starts_at: float
    ends_at: float
    minute_only: bool = False
    classes: list[ClassMetrics] = field(default_factory=list)


def parse_period(text: str | None, default: int = 1) -> int:
    """``1h``..``72h`` (or a bare number of hours) -> hours, clamped to 1..72; bad text is the
    default (a query string is user input: never an error page for it)."""
    if not text:
        return default
    text = text.strip().lower().removesuffix("h")
    try:
        hours = int(text)
    except ValueError:
        return default
    return min(max(hours, 1), MAX_HOURS)


class MetricsReader:
    def __init__(self, r: redis_lib.Redis, keys: Keys):
        self.r = r
        self.ns = keys.ns

    def _windows(self, hours: int, now: float, step: int) -> list[float]:
        count = hours * 3600 // step
        end = now - now % step
        return [end - i * step for i in range(count)]

    def top(self, hours: int = 1, now: float | None = None, substr: str | None = None) -> Period:
        """Every class's totals over the last ``hours``, the busiest first. Up to 8 hours from
        the minute hashes; longer from the ten-minute rollups, or, when no rollup exists (a
        writer that keeps minute hashes only), from the minute hashes of the last 8 hours."""
        now = time.time() if now is None else now
        hours = min(max(int(hours), 1), MAX_HOURS)
        period = self._read(hours, now, 60 if hours <= MINUTE_TTL_HOURS else 600)
        if period is None:
            period = self._read(MINUTE_TTL_HOURS, now, 60)
            period.hours, period.minute_only = hours, True
        if substr:
            period.classes = [c for c in period.classes if substr.lower() in c.klass.lower()]
        return period

    def _read(self, hours: int, now: float, step: int) -> Period | None:
        times = self._windows(hours, now, step)
        name = minute_key if step == 60 else rollup_key
        pipe = self.r.pipeline(transaction=False)
        for t in times:
            pipe.hgetall(self.ns + name(t))
        found = pipe.execute()
        if step != 60 and not any(found):
            return None
        classes: dict[str, ClassMetrics] = {}
        for fields in found:
            for k, v in fields.items():
                klass, _, metric = name_of(k).rpartition("|")
                if klass:
                    classes.setdefault(klass, ClassMetrics(klass)).add(metric, _int(v))
        ordered = sorted(classes.values(), key=lambda c: (-c.processed, c.klass))
        return Period(hours, step, times[-1], now, classes=ordered)

    def series(self, klass: str, hours: int = 1,
               now: float | None = None) -> list[tuple[float, ClassMetrics]]:
        """One class per minute (or ten minutes beyond 8 hours), oldest first."""
        now = time.time() if now is None else now
        hours = min(max(int(hours), 1), MAX_HOURS)
        step = 60 if hours <= MINUTE_TTL_HOURS else 600
        times = self._windows(hours, now, step)
        name = minute_key if step == 60 else rollup_key
        fields = [to_key(f"{klass}|{m}") for m in (FIELD_PROCESSED, FIELD_FAILED, FIELD_MS)]
        pipe = self.r.pipeline(transaction=False)
        for t in times:
            pipe.hmget(self.ns + name(t), fields)
        out = []
        for t, (p, f, ms) in zip(times, pipe.execute()):
            out.append((t, ClassMetrics(klass, _int(p), _int(f), _int(ms))))
        return out[::-1]

    def histogram(self, klass: str, hours: int = 1, now: float | None = None) -> list[int]:
        """Runs per execution-time bucket (LABELS) over the last ``hours`` (8 at most: the
        histograms' TTL), summed over the minutes."""
        now = time.time() if now is None else now
        hours = min(max(int(hours), 1), MINUTE_TTL_HOURS)
        pipe = self.r.pipeline(transaction=False)
        for t in self._windows(hours, now, 60):
            pipe.execute_command("BITFIELD_RO", to_key(self.ns + histogram_key(klass, t)),
                                 *_FETCH)
        total = [0] * len(LABELS)
        for counts in pipe.execute():
            for i, n in enumerate(counts or ()):
                total[i] += int(n or 0)
        return total


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
