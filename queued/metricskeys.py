"""Sidekiq 7's per-class execution metrics in Redis: key names, fields, buckets, TTLs.

Shared by the daemon (queued/server/metrics.py writes them on each heartbeat) and the operator's
side (the dashboard reads them), so it imports nothing of either. Facts from Sidekiq 7.0-7.3's
``lib/sidekiq/metrics/{tracking,shared,query}.rb`` (the layout Sidekiq 7's Web UI Metrics tab
reads); the code is ours:

- one hash per UTC minute, ``j|<%Y%m%d>|<%-H>:<%-M>`` (four-digit year, hour and minute NOT
  zero-padded: ``j|20261123|9:5``), fields ``<Class>|p`` (jobs ended, failures included),
  ``<Class>|f`` (failed), ``<Class>|ms`` (milliseconds of the successful ones only), HINCRBY,
  TTL 8 hours;
- one execution-time histogram per class and UTC minute, ``<Class>-<%d>-<%H>:<%-M>`` (day and
  hour zero-padded, minute not: ``HardJob-23-09:5``; no prefix), a BITFIELD of 26 ``u16``
  counters (``#i`` = bucket i), INCRBY with ``OVERFLOW SAT``, successful jobs only, TTL 8 hours.

Sidekiq 8 changed both (``j|%y%m%d|%-H:%M``, a 10-minute rollup ``j|%y%m%d|%-H:<tens>`` kept
3 days, histograms ``h|<Class>-%-d-%-H:%-M``): Sidekiq 8's Web UI does not see these keys.

Names here carry no namespace: ``queued.keys.Keys`` prefixes them like every other key.
"""
from __future__ import annotations

from datetime import datetime, timezone

#: Upper bounds (milliseconds, exclusive) of the 26 histogram buckets, Sidekiq's
#: BUCKET_INTERVALS: a job of ``ms`` milliseconds counts in the first bucket with
#: ``ms < BUCKETS[i]``; the last one ("Slow") takes everything from 335 s up.
BUCKETS: tuple[float, ...] = (
    20, 30, 45, 65, 100,
    150, 225, 335, 500, 750,
    1100, 1700, 2500, 3800, 5750,
    8500, 13000, 20000, 30000, 45000,
    65000, 100000, 150000, 225000, 335000,
    float("inf"))
#: Sidekiq's labels of the buckets, for display.
BUCKET_LABELS: tuple[str, ...] = (
    "20ms", "30ms", "45ms", "65ms", "100ms",
    "150ms", "225ms", "335ms", "500ms", "750ms",
    "1.1s", "1.7s", "2.5s", "3.8s", "5.75s",
    "8.5s", "13s", "20s", "30s", "45s",
    "65s", "100s", "150s", "225s", "335s",
    "Slow")
#: The BITFIELD type of one bucket (saturates at 65,535 per class and minute).
BUCKET_TYPE = "u16"

FIELD_PROCESSED = "p"
FIELD_FAILED = "f"
FIELD_MS = "ms"

#: Seconds the per-minute hashes and the histograms live (Sidekiq 7: 8 hours each).
MINUTE_TTL = 8 * 60 * 60
HISTOGRAM_TTL = 8 * 60 * 60


def _utc(t: datetime) -> datetime:
    """An aware time in UTC; a naive one is taken to be UTC already (Sidekiq's metrics are
    UTC only)."""
    return t.astimezone(timezone.utc) if t.tzinfo is not None else t


def minute_key(t: datetime) -> str:
    """The per-minute hash of ``t``'s UTC minute: ``j|20261123|9:5``."""
    t = _utc(t)
    return f"j|{t:%Y%m%d}|{t.hour}:{t.minute}"


def histogram_key(klass: str, t: datetime) -> str:
    """The histogram of ``klass`` in ``t``'s UTC minute: ``HardJob-23-09:5``."""
    t = _utc(t)
    return f"{klass}-{t:%d}-{t:%H}:{t.minute}"


def field(klass: str, what: str) -> str:
    """A field of the per-minute hash: ``field("HardJob", FIELD_MS)`` is ``HardJob|ms``."""
    return f"{klass}|{what}"


def bucket_index(ms: float) -> int:
    """The histogram bucket of a job that took ``ms`` milliseconds (Sidekiq's rule)."""
    for i, bound in enumerate(BUCKETS):
        if ms < bound:
            return i
    return len(BUCKETS) - 1


def histogram_fetch_args() -> list[str]:
    """BITFIELD_RO arguments reading the 26 buckets in order (``GET u16 #0 ...``)."""
    return [word for i in range(len(BUCKETS)) for word in ("GET", BUCKET_TYPE, f"#{i}")]
