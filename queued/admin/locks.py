"""Unique locks, the operator's side (issue 21): list them, give them up by hand, and give up the
locks of the jobs an operator removes.

A unique job's lock (queued/unique.py) must go when the job is gone for good, or every later
push of the same job is dropped until the lock's TTL runs out: Sidekiq Enterprise kept it when
a job was deleted from its Web UI (its #5917). So each removal path gives the removed jobs'
locks up, only for the jobs it removed, and only where that jid still holds the lock (a lock
taken since by a later push is that push's): a delete or kill from a set (jobsets.py, told by
move.lua which removed jobs were unique), a delete from a queue (queues.py), and a clear (the
whole key taken away in one step, snapshot.py, its unique jobs read back from the copy by a
script that returns only them). A retry by hand keeps the job pending: its lock stays (a job retried from
dead, whose lock went at its death, takes it again as it starts).

Listing walks the keys with SCAN: there is no index of locks on purpose (unique.py). A key under
the prefix that is not a lock (another type, a name that is not UTF-8: read as names.py reads
every name) is listed all the same, with what is odd about it in ``trouble``; one such key made
``queuedctl locks`` and the Unique locks page fail whole.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

import redis as redis_lib

from .. import unique
from ..connection import Script
from ..keys import Keys
from ..payload import json_object
from .entries import Entry
from .names import name_of, to_key
from .snapshot import Snapshot

_LUA = os.path.join(os.path.dirname(__file__), "lua")
CLEAR_UNIQUE = Script(_LUA, "clear_unique")
#: Members read per script call when a cleared key is searched for unique jobs.
CHUNK = 1000


@dataclass(frozen=True)
class LockInfo:
    digest: str
    jid: str
    ttl: float | None  # seconds left; None: no TTL (made by hand)
    trouble: str = ""  # what is odd about the key ("" when nothing): not a lock's string

    def as_dict(self) -> dict:
        return {"digest": self.digest, "jid": self.jid, "ttl": self.ttl,
                "trouble": self.trouble or None}


def release_removed(r: redis_lib.Redis, keys: Keys, entries: Iterable[Entry]) -> int:
    """Give up the locks the removed jobs held; how many were given up. (A job without a
    "queue" key has its lock by the queue it was in: unique.digest.)"""
    return unique.release_pairs(r, [pair for e in entries
                                    for pair in unique.held_by(keys, [e.msg], e.queue)])


def release_taken(r: redis_lib.Redis, keys: Keys, snap: Snapshot,
                  queue: str | None = None) -> int:
    """Give up the locks of the unique jobs of a whole queue or set removed in one step (a
    clear: Snapshot(take=True)). The copy is searched by a script, a page at a time, which
    returns only the members that name ``unique_for``, so the jobs cross the network only when
    they are unique; how many locks were given up."""
    released = 0
    for start in range(0, snap.count, CHUNK):
        found = CLEAR_UNIQUE(r, [snap.key], [snap.kind, start, start + CHUNK - 1])
        if found:
            released += unique.release(r, keys, [json_object(m) for m in found], queue)
    return released


class Locks:
    """The unique locks of one Redis (and namespace)."""

    def __init__(self, r: redis_lib.Redis, keys: Keys):
        self.r = r
        self.keys = keys
        self.prefix = keys.unique("")

    def scan(self, limit: int | None = None) -> list[LockInfo]:
        """Every lock (up to ``limit``), each with the jid holding it and its time left."""
        names = []
        for key in self.r.scan_iter(match=self.keys.unique_pattern, count=1000):
            names.append(key)
            if limit is not None and len(names) >= limit:
                break
        if not names:
            return []
        pipe = self.r.pipeline(transaction=False)
        for key in names:
            pipe.get(key)
            pipe.pttl(key)
        found = pipe.execute(raise_on_error=False)
        out = []
        for i, key in enumerate(names):
            lock = _lock_info(name_of(key)[len(self.prefix):], found[2 * i], found[2 * i + 1])
            if lock is not None:
                out.append(lock)
        return sorted(out, key=lambda lock: lock.digest)

    def get(self, digest: str) -> LockInfo | None:
        key = to_key(self.keys.unique(digest))
        pipe = self.r.pipeline(transaction=False)
        pipe.get(key)
        pipe.pttl(key)
        return _lock_info(digest, *pipe.execute(raise_on_error=False))

    def release(self, digest: str) -> bool:
        """Give one lock up whoever holds it (the next push of its job goes in); False if
        there was none."""
        return self.r.delete(to_key(self.keys.unique(digest))) == 1

    def release_all(self) -> int:
        """Give every lock up; how many there were."""
        done = 0
        batch = []
        for key in self.r.scan_iter(match=self.keys.unique_pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                done += self.r.delete(*batch)
                batch = []
        if batch:
            done += self.r.delete(*batch)
        return done

    @staticmethod
    def digest_of(klass: str, queue: str, args: list) -> str:
        """The digest of a job's lock, to find the lock of a job you know."""
        return unique.digest({"class": klass, "queue": queue, "args": args})


def _lock_info(digest: str, jid, ttl) -> LockInfo | None:
    """A lock as read (GET, PTTL), or None if it expired meanwhile; a key of another type is
    listed with its trouble, its holder unknown."""
    time_left = ttl / 1000 if isinstance(ttl, int) and ttl >= 0 else None
    if isinstance(jid, Exception):
        return LockInfo(digest, "", time_left, f"not a lock: the key holds another type ({jid})")
    if jid is None:
        return None
    return LockInfo(digest, name_of(jid), time_left)
