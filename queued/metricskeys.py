"""Sidekiq's per-class execution metrics in Redis: key names, fields, buckets, TTLs.

Shared by the daemon (queued/server/metricsflush.py writes them on each heartbeat) and the
operator's side (the dashboard reads them), so it imports nothing of either. Facts from
Sidekiq's ``lib/sidekiq/metrics/{tracking,shared,query}.rb``; the code is ours. Two layouts,
both written by the daemon so the Web UI of either Sidekiq shows queued's jobs:

Sidekiq 8 (8.0 on, today's; what ``queuedctl web`` reads), all UTC:
- a hash per minute ``j|<%y%m%d>|<%-H>:<%M>`` (``j|261123|9:05``: two-digit year, hour not
  zero-padded, minute zero-padded), TTL 8 hours, and a 10-minute rollup named by the minute's
  key without its last digit (``j|261123|9:0`` holds 09:00-09:09), TTL 3 days; fields
  ``<Class>|p`` (jobs ended, failures included), ``<Class>|f`` (failed), ``<Class>|ms``
  (milliseconds of the successful ones only), by HINCRBY;
- a histogram per class and minute ``h|<Class>-<%-d>-<%-H>:<%-M>`` (``h|HardJob-23-9:5``):
  a BITFIELD of 26 ``u16`` counters (``#i`` = bucket i), INCRBY with ``OVERFLOW SAT``,
  successful jobs only, TTL 8 hours.

Sidekiq 7 (7.0-7.3), the ``_v7`` names: the minute hash ``j|<%Y%m%d>|<%-H>:<%-M>``
(``j|20261123|9:5``), no rollup, histograms ``<Class>-<%d>-<%H>:<%-M>`` (``HardJob-23-09:5``,
no prefix); the same fields, buckets and 8-hour TTLs.

Names here carry no namespace: ``queued.keys.Keys`` prefixes them like every other key.
A time is a ``datetime`` (naive ones are taken as UTC) or seconds since the epoch.
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

#: Seconds the per-minute hashes and the histograms live (8 hours in Sidekiq 7 and 8), and the
#: 10-minute rollups (Sidekiq 8: 3 days).
MINUTE_TTL = 8 * 60 * 60
HISTOGRAM_TTL = 8 * 60 * 60
ROLLUP_TTL = 3 * 24 * 60 * 60


def _utc(t: datetime | float) -> datetime:
    if not isinstance(t, datetime):
        return datetime.fromtimestamp(t, timezone.utc)
    return t.astimezone(timezone.utc) if t.tzinfo is not None else t


def minute_key(t: datetime | float) -> str:
    """Sidekiq 8's hash of ``t``'s UTC minute: ``j|261123|9:05``."""
    t = _utc(t)
    return f"j|{t:%y%m%d}|{t.hour}:{t.minute:02d}"


def rollup_key(t: datetime | float) -> str:
    """Sidekiq 8's 10-minute hash holding ``t``: ``j|261123|9:0`` (09:00-09:09)."""
    return minute_key(t)[:-1]


def histogram_key(klass: str, t: datetime | float) -> str:
    """Sidekiq 8's histogram of ``klass`` in ``t``'s UTC minute: ``h|HardJob-23-9:5``."""
    t = _utc(t)
    return f"h|{klass}-{t.day}-{t.hour}:{t.minute}"


def minute_key_v7(t: datetime | float) -> str:
    """Sidekiq 7's hash of ``t``'s UTC minute: ``j|20261123|9:5``."""
    t = _utc(t)
    return f"j|{t:%Y%m%d}|{t.hour}:{t.minute}"


def histogram_key_v7(klass: str, t: datetime | float) -> str:
    """Sidekiq 7's histogram of ``klass`` in ``t``'s UTC minute: ``HardJob-23-09:5``."""
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
