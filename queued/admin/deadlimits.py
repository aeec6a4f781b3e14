"""How many dead jobs to keep, and for how long, when the operator's tools add one to ``dead``
(a kill trims the set in the same step, as Sidekiq's DeadSet#kill and the daemon's failure path
do).

The daemons are what keeps ``dead``: each publishes its ``dead_max_jobs`` and
``dead_timeout_in_seconds`` in its heartbeat's ``info`` (server/heartbeat.py). A kill uses the
largest of the live daemons' bounds, so it never trims a job that some daemon keeps; with no
live daemon publishing them, the operator's own config (queuedctl's ``-C`` file, or
``Admin(dead_limits=...)``); else Sidekiq's (10,000 jobs, 180 days). Before issue 16 the API
always wrote Sidekiq's: a daemon told to keep 100,000 lost 90,000 on the first kill from
queuedctl.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import redis as redis_lib

from ..keys import Keys
from .names import name_of, to_key


@dataclass(frozen=True)
class DeadLimits:
    #: Most jobs kept in dead (the trim keeps one less, as Sidekiq's does).
    max_jobs: int = 10_000
    #: Seconds a dead job is kept.
    timeout: int = 180 * 24 * 3600

    def trim_args(self, now: float) -> list:
        """move.lua's ARGV[3], ARGV[4]: the lowest score kept (exclusive), the rank trim."""
        return [repr(now - self.timeout), -self.max_jobs]


#: Sidekiq's defaults (its DeadSet's max_jobs and timeout; the daemon's too).
SIDEKIQ = DeadLimits()


def published(r: redis_lib.Redis, keys: Keys) -> DeadLimits | None:
    """The largest bounds the live daemons publish, or None when none does (no live
    daemon, or only Sidekiq's processes and older queued ones)."""
    identities = [i for i in r.sscan_iter(keys.processes)]
    if not identities:
        return None
    pipe = r.pipeline(transaction=False)
    for identity in identities:
        pipe.hget(to_key(keys.process(name_of(identity))), "info")
    found = [_bounds(info) for info in pipe.execute()]
    found = [b for b in found if b is not None]
    if not found:
        return None
    return DeadLimits(max(b[0] for b in found), max(b[1] for b in found))


def _bounds(info: bytes | None) -> tuple[int, int] | None:
    try:
        doc = json.loads(info) if info else None
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    max_jobs, timeout = doc.get("dead_max_jobs"), doc.get("dead_timeout_in_seconds")
    if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
           for v in (max_jobs, timeout)):
        return max_jobs, timeout
    return None


def resolve(r: redis_lib.Redis, keys: Keys, fallback: DeadLimits | None) -> DeadLimits:
    """The bounds a kill trims dead to now: the daemons', else ``fallback``, else Sidekiq's."""
    return published(r, keys) or fallback or SIDEKIQ
