"""A queue as Sidekiq's ``Sidekiq::Queue`` sees it: size, latency, its jobs, clear; and pause,
where Sidekiq Pro keeps it (the ``paused`` set), which every queued worker honours within one
fetch round (the daemon watches the set and wakes its idle workers when it changes).
"""
from __future__ import annotations

import os
import time
from typing import Callable, Iterator

import redis as redis_lib

from ..connection import Script
from ..payload import json_object, to_epoch
from ..keys import Keys
from .entries import Entry, Filter
from .locks import release_removed, release_taken
from .names import to_key
from .snapshot import Snapshot
from .taskmarks import mark_removed, mark_taken

Progress = Callable[[int, int], None]  # (examined so far, removed so far)
FRONT = Script(os.path.join(os.path.dirname(__file__), "lua"), "queue_front")
REMOVE_COUNTED = Script(os.path.join(os.path.dirname(__file__), "lua"), "remove_counted")
#: How many elements beyond a chunk remove_counted.lua reads from the tail looking for it
#: (jobs pushed back to that end since the count: a crash's, a Run next's).
TAIL_SLACK = 5000
#: How far behind its place on a page a job is looked for first (jobs only move toward the
#: front as workers take the ones ahead of it).
LOCATE_WINDOW = 1000


class Queue:
    def __init__(self, r: redis_lib.Redis, keys: Keys, name: str):
        self.r = r
        self.keys = keys
        self.name = name
        # bytes: a name that is not UTF-8 addresses its own key (names.py)
        self.key = to_key(keys.queue(name))
        self.member = to_key(name)

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
        return bool(self.r.sismember(self.keys.paused, self.member))

    def pause(self) -> bool:
        """Workers stop taking jobs from it (its jobs stay put). False if it was paused."""
        return self.r.sadd(self.keys.paused, self.member) == 1

    def unpause(self) -> bool:
        return self.r.srem(self.keys.paused, self.member) == 1

    def snapshot(self, held: bool = False) -> Snapshot:
        """A copy of the queue to count, then act on (JobSet.snapshot)."""
        return Snapshot(self.r, self.keys, self.key, "list", held=held)

    def resume(self, token: str) -> Snapshot:
        return Snapshot.resume(self.r, self.keys, token, "list", self.key)

    def count_in(self, snap: Snapshot, where: Filter | None = None) -> int:
        if not where:
            return snap.count
        return sum(1 for rows in snap.pages(1000) for raw in rows
                   if where.matches(Entry(raw, None, self.source)))

    def clear(self) -> int:
        """Drop every job of the queue and the queue from ``queues``, in one step (Sidekiq's
        Queue#clear); the number of jobs it held. Its task jobs are told afterwards, and its
        unique jobs' locks given up."""
        with Snapshot(self.r, self.keys, self.key, "list", take=True,
                      also=lambda pipe: pipe.srem(self.keys.queues, self.member)) as snap:
            mark_taken(self.r, self.keys, snap, self.source, f"queue {self.name}")
            release_taken(self.r, self.keys, snap, self.name)
        return snap.count

    def page(self, offset: int = 0, limit: int = 25) -> list[Entry]:
        """Jobs in the order they will run (the next one first)."""
        end = -1 - offset
        rows = self.r.lrange(self.key, max(end - limit + 1, -10**12), end) if limit else []
        return [Entry(raw, None, self.source) for raw in reversed(rows)]

    def scan(self, where: Filter | None = None, *, limit: int | None = None,
             batch: int = 1000) -> Iterator[Entry]:
        """Every job (that matches ``where``), next to run first; ``limit``: the first so
        many. The queue is read from the end producers push to, because workers take from
        the other end: read from theirs, each job taken shifted the pages under the walk and
        jobs were skipped (issue 16). A job pushed meanwhile shifts the walk back instead, and
        a job read again is given once (so jobs with the very same bytes are one). A job
        taken by a worker meanwhile may still be given: acting on it finds it gone."""
        where = where or Filter()
        found: list[Entry] = []
        seen: set[bytes] = set()
        start = 0
        while True:
            rows = self.r.lrange(self.key, start, start + batch - 1)
            for raw in rows:
                if raw in seen:
                    continue
                entry = Entry(raw, None, self.source)
                if where.matches(entry):
                    seen.add(raw)
                    found.append(entry)
            if len(rows) < batch:
                break
            start += batch
        found.reverse()
        return iter(found if limit is None else found[:limit])

    def find(self, jid: str) -> Entry | None:
        return next(self.scan(Filter.of(jids=[jid]), limit=1), None)

    def locate(self, match: Callable[[bytes], bool], hint: int = 0,
               batch: int = 1000) -> Entry | None:
        """The job whose stored bytes ``match``: looked for first about where a page showed it
        (``hint``: its place then, 0 the next to run; it is there still, or nearer the front
        as workers take the jobs ahead), then in the whole queue, ``batch`` at a time."""
        near = self.r.lrange(self.key, -hint - 2, -max(hint - LOCATE_WINDOW, 0) - 1)
        for raw in reversed(near):
            if match(raw):
                return Entry(raw, None, self.source)
        start = 0
        while True:
            rows = self.r.lrange(self.key, start, start + batch - 1)
            for raw in rows:
                if match(raw):
                    return Entry(raw, None, self.source)
            if len(rows) < batch:
                return None
            start += batch

    def run_next(self, entry: Entry) -> bool:
        """Move this waiting job (these exact bytes) to the front: the next a worker takes.
        False if it is no longer there (taken, deleted)."""
        return FRONT(self.r, [self.key], [entry.raw]) == 1

    def delete(self, entry: Entry) -> bool:
        """Remove this job (these exact bytes) from the queue, if it is still there."""
        if self.r.lrem(self.key, 1, entry.raw) != 1:
            return False
        mark_removed(self.r, self.keys, [entry], "delete", f"queue {self.name}")
        release_removed(self.r, self.keys, [entry])
        return True

    def delete_all(self, where: Filter | None = None, progress: Progress | None = None,
                   batch: int = 500, snapshot: Snapshot | None = None) -> int:
        """Remove every job that matches ``where`` (with no filter: clear(); with no filter
        and a ``snapshot``: clear_counted()); the number removed. It reads a copy of the queue
        taken when it begins (snapshot.py; ``snapshot``: the one a question counted), ``batch``
        jobs per round trip, and removes each match from the queue by its exact bytes: workers
        taking jobs meanwhile cannot make it skip one (issue 16), a job they took first is
        simply not found, and a job pushed meanwhile is never removed. Each removal is an LREM
        (O(queue length)), as Sidekiq's Job#delete: fine for thousands, slow for a million."""
        if not where:
            return self.clear() if snapshot is None else self.clear_counted(snapshot, progress)
        if snapshot is None:
            with self.snapshot() as snap:
                return self._delete_matches(where, progress, batch, snap)
        return self._delete_matches(where, progress, batch, snapshot)

    def _delete_matches(self, where: Filter, progress: Progress | None, batch: int,
                        snap: Snapshot) -> int:
        done = examined = 0
        for rows in snap.pages(batch):
            examined += len(rows)
            chunk = [e for e in (Entry(raw, None, self.source) for raw in rows)
                     if where.matches(e)]
            if chunk:
                done += self._remove(chunk)
            if progress:
                progress(examined, done)
        return done

    def clear_counted(self, snap: Snapshot, progress: Progress | None = None,
                      batch: int = 500) -> int:
        """Remove the jobs of ``snap`` (the copy a question counted) that are still in the
        queue, and the queue from ``queues`` if that leaves it empty; the number removed.
        Unlike clear(), a job pushed since the question stays (red team RT1, finding 7). Read
        from the tail, the oldest first, ``batch`` at a time (remove_counted.lua): each round
        trip costs about the chunk, whatever the queue's length or how many were pushed."""
        done = examined = 0
        for rows in snap.pages(batch) if snap.count else [[]]:  # (empty: only the SREM)
            examined += len(rows)
            positions, _read = REMOVE_COUNTED(self.r, [self.key, self.keys.queues],
                                              [len(rows) + TAIL_SLACK, self.member, *rows])
            gone = [Entry(rows[int(i) - 1], None, self.source) for i in positions]
            if gone:
                mark_removed(self.r, self.keys, gone, "delete", f"queue {self.name}")
                release_removed(self.r, self.keys, gone)
            done += len(gone)
            if progress:
                progress(examined, done)
        return done

    def _remove(self, entries: list[Entry]) -> int:
        pipe = self.r.pipeline(transaction=False)
        for entry in entries:
            pipe.lrem(self.key, 1, entry.raw)
        removed = pipe.execute()
        gone = [e for e, n in zip(entries, removed) if n]
        mark_removed(self.r, self.keys, gone, "delete", f"queue {self.name}")
        release_removed(self.r, self.keys, gone)
        return sum(removed)

    @property
    def source(self) -> str:
        return f"queue:{self.name}"


def latency_of(oldest: bytes | None, now: float | None = None) -> float:
    """Sidekiq's Queue#latency for the job at the queue's head (None: empty)."""
    if oldest is None:
        return 0.0
    now = time.time() if now is None else now
    msg = json_object(oldest)
    enqueued = to_epoch(msg.get("enqueued_at")) if msg is not None else None
    return max(0.0, now - enqueued) if enqueued is not None else 0.0
