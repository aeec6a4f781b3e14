"""The master's flush of per-class metrics to Redis, in Sidekiq's layouts (metricskeys.py).

On each heartbeat, and once more at exit (as Sidekiq flushes on its beat and at exit), the
master reads the totals its workers keep in shared memory (metrics.py), takes the difference
from what it wrote last time and, for each job class (summed over queues, as Sidekiq keys
them), in one MULTI:
- ``HINCRBY`` of ``<Class>|p``, ``<Class>|f`` and ``<Class>|ms`` in the current UTC minute's
  hash (8-hour TTL) and 10-minute hash (3 days) of Sidekiq 8, and in Sidekiq 7's minute hash
  (8 hours);
- ``BITFIELD ... OVERFLOW SAT INCRBY u16 #i n`` for each bucket that moved, in Sidekiq 8's and
  Sidekiq 7's histogram of the minute (8 hours).
So the Metrics tab of Sidekiq 8's and of Sidekiq 7's Web UI, and queued's dashboard, show every
host's jobs. A flush that fails (Redis away) changes nothing here: its counts go out with the
next one (MULTI: all or nothing). Only this module writes these keys.
"""
from __future__ import annotations

from datetime import datetime, timezone

import redis

from ..keys import Keys
from ..metricskeys import (BUCKET_TYPE, FIELD_FAILED, FIELD_MS, FIELD_PROCESSED,
                           HISTOGRAM_TTL, MINUTE_TTL, ROLLUP_TTL, field)
from .metrics import BUCKET0, FAILED, MICROS, PROCESSED, MetricsTable


class Flusher:
    def __init__(self, r: redis.Redis, keys: Keys, table: MetricsTable):
        self.r = r
        self.keys = keys
        self.reader = table.reader()
        self.sent: dict[tuple[str, str], list[int]] = {}  # what Redis has, by (class, queue)

    def deltas(self, totals: dict[tuple[str, str], list[int]]) -> dict[str, list[int]]:
        """{class: [processed, failed, ms, *buckets]} not yet in Redis. Milliseconds are the
        difference of the whole-millisecond totals, so their sum over flushes stays exact."""
        out: dict[str, list[int]] = {}
        for key, row in totals.items():
            old = self.sent.get(key)
            if old == row:
                continue
            old = old or [0] * len(row)
            delta = [a - b for a, b in zip(row, old)]
            delta[MICROS] = row[MICROS] // 1000 - old[MICROS] // 1000
            acc = out.get(key[0])
            out[key[0]] = delta if acc is None else [a + b for a, b in zip(acc, delta)]
        return out

    def flush(self, now: float) -> int:
        """Write what changed since the last flush; the number of classes written."""
        totals = self.reader.totals()
        changes = self.deltas(totals)
        if changes:
            t = datetime.fromtimestamp(now, timezone.utc)
            k = self.keys
            hashes = ((k.metrics_minute(t), MINUTE_TTL), (k.metrics_rollup(t), ROLLUP_TTL),
                      (k.metrics_minute_v7(t), MINUTE_TTL))
            pipe = self.r.pipeline(transaction=True)
            for klass, d in changes.items():
                self._class(pipe, [h for h, _ in hashes], klass, d, t)
            for name, ttl in hashes:
                pipe.expire(name, ttl)
            pipe.execute()
        self.sent = totals
        return len(changes)

    def _class(self, pipe, hashes: list[str], klass: str, d: list[int], t: datetime) -> None:
        for what, n in ((FIELD_PROCESSED, d[PROCESSED]), (FIELD_FAILED, d[FAILED]),
                        (FIELD_MS, d[MICROS])):
            if n:
                for name in hashes:
                    pipe.hincrby(name, field(klass, what), n)
        incr = [word for i, n in enumerate(d[BUCKET0:]) if n
                for word in ("INCRBY", BUCKET_TYPE, f"#{i}", n)]
        if incr:
            for gram in (self.keys.metrics_histogram(klass, t),
                         self.keys.metrics_histogram_v7(klass, t)):
                pipe.execute_command("BITFIELD", gram, "OVERFLOW", "SAT", *incr)
                pipe.expire(gram, HISTOGRAM_TTL)
