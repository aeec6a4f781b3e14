"""A queue as Sidekiq's ``Sidekiq::Queue`` sees it: size, latency, its jobs, clear; and pause,
where Sidekiq Pro keeps it (the ``paused`` set), which every queued worker honours within one
fetch round (the daemon watches the set and wakes its idle workers when it changes).
"""
from __future__ import annotations

import json
import time
from typing import Callable, Iterator

import redis as redis_lib

from ..payload import to_epoch
from ..keys import Keys
from .entries import Entry, Filter
from .locks import clear_releasing, release_removed
from .taskmarks import mark_removed

Progress = Callable[[int, int], None]  # (examined so far, removed so far)


class Queue:
    def __init__(self, r: redis_lib.Redis, keys: Keys, name: str):
        self.r = r
        self.keys = keys
        self.name = name
        self.key = keys.queue(name)

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    def size(self) -> int:
        return int(self.r.llen(self.key))

    def latency(self, now: float | None = None) -> float:
        """Seconds the oldest job has waited (from its ``enqueued_at``; Sidekiq 8's integer
        milliseconds too); 0 when the queue is empty."""
        oldest = self.r.lindex(self.key, -1)
        return latency_of(oldest, now)

    def paused(self) -> bool:
        return bool(self.r.sismember(self.keys.paused, self.name))

    def pause(self) -> bool:
        """Workers stop taking jobs from it (its jobs stay put). False if it was paused."""
        return self.r.sadd(self.keys.paused, self.name) == 1

    def unpause(self) -> bool:
        return self.r.srem(self.keys.paused, self.name) == 1

    def clear(self) -> int:
        """Drop every job of the queue and the queue from ``queues``, in one step (Sidekiq's
        Queue#clear); the number of jobs it held. The unique locks its jobs held are given up
        (locks.py: read from the cleared jobs, after the step)."""
        return clear_releasing(self.r, self.keys, self.key, [self.keys.queues, self.name])

    def page(self, offset: int = 0, limit: int = 25) -> list[Entry]:
        """Jobs in the order they will run (the next one first)."""
        end = -1 - offset
        rows = self.r.lrange(self.key, max(end - limit + 1, -10**12), end) if limit else []
        return [Entry(raw, None, f"queue:{self.name}") for raw in reversed(rows)]

    def scan(self, where: Filter | None = None, *, limit: int | None = None,
             batch: int = 1000) -> Iterator[Entry]:
        """Every job (that matches ``where``), next to run first, a page at a time. A queue
        moves while it is read: a job taken meanwhile may be skipped, one may be seen twice."""
        where = where or Filter()
        found, offset = 0, 0
        while True:
            rows = self.page(offset, batch)
            for entry in rows:
                if where.matches(entry):
                    found += 1
                    yield entry
                    if limit is not None and found >= limit:
                        return
            if len(rows) < batch:
                return
            offset += batch

    def find(self, jid: str) -> Entry | None:
        return next(self.scan(Filter.of(jids=[jid]), limit=1), None)

    def delete(self, entry: Entry) -> bool:
        """Remove this job (these exact bytes) from the queue, if it is still there."""
        if self.r.lrem(self.key, 1, entry.raw) != 1:
            return False
        mark_removed(self.r, self.keys, [entry], "delete", f"queue {self.name}")
        release_removed(self.r, self.keys, [entry])
        return True

    def delete_all(self, where: Filter | None = None, progress: Progress | None = None,
                   batch: int = 500) -> int:
        """Remove every job that matches ``where`` (with no filter: clear()); the number
        removed. The matches are read first and then removed by their exact bytes, ``batch``
        per round trip: removing while paging would shift the pages under the walk and skip
        jobs. A job a worker took meanwhile is simply not found. Each removal is an LREM
        (O(queue length)), as Sidekiq's Job#delete: fine for thousands, slow for a million."""
        if not where:
            return self.clear()
        matches = list(self.scan(where))
        done = 0
        for start in range(0, len(matches), batch):
            pipe = self.r.pipeline(transaction=False)
            chunk = matches[start:start + batch]
            for entry in chunk:
                pipe.lrem(self.key, 1, entry.raw)
            removed = pipe.execute()
            done += sum(removed)
            gone = [e for e, n in zip(chunk, removed) if n]
            mark_removed(self.r, self.keys, gone, "delete", f"queue {self.name}")
            release_removed(self.r, self.keys, gone)
            if progress:
                progress(min(start + batch, len(matches)), done)
        return done


def latency_of(oldest: bytes | None, now: float | None = None) -> float:
    """Sidekiq's Queue#latency for the job at the queue's head (None: empty)."""
    if oldest is None:
        return 0.0
    now = time.time() if now is None else now
    try:
        msg = json.loads(oldest)
    except ValueError:
        return 0.0
    enqueued = to_epoch(msg.get("enqueued_at")) if isinstance(msg, dict) else None
    return max(0.0, now - enqueued) if enqueued is not None else 0.0
