"""The Redis side of job ends in a worker of many jobs at once, safe from any of its threads.

A worker of one job at a time ends its jobs on its one pipelined connection (fetch.py,
sentahead.py: acks ride with the next reserve call, task marks are sent ahead, replies read
later). That connection is not thread-safe, and in a worker of many jobs it belongs to the
dispatcher (dispatch.py), which reserves. So the job threads and the event loop end their jobs here:
- an ack is queued (``acks``, a deque: appends and pops are atomic) and goes out with the
  dispatcher's next reserve call, as before, or at once if it reserves nothing now
  (``Dispatcher._flush``): the batching that makes a short job cheap is kept;
- everything else (a failure, a release, a bury, the end of a job of a task, a task mark, a
  ``say()``, a ``touch()``) is a call on a redis-py client with a connection pool (thread-safe:
  a connection per thread at a time), made and answered at once, in order, by the job's own
  thread; an end that must take effect and could not (refused, or its outcome lost with the
  connection) is queued (``again``) and run by the dispatcher before its next reserve, as the
  pipelined connection does with its calls sent ahead.

Does not own reserving (fetch.py) nor deciding the outcome (outcomes.py).
"""
from __future__ import annotations

import collections
import logging

import redis

from .. import connection
from .reserved import GONE, Reservation, failure_call
from .scripts import FAIL

log = logging.getLogger("queued.fetch")


class SharedEnds:
    def __init__(self, url: str, keys, identity: str, slot: int, dead_timeout: int,
                 dead_max_jobs: int):
        self.keys = keys
        self.reserved_key = keys.reserved(identity, slot)
        self.dead_timeout = dead_timeout
        self.dead_max_jobs = dead_max_jobs
        self.r = self.redis = connection.make_redis(url, name=f"queued-worker-{slot}-jobs")
        self.acks: collections.deque[bytes] = collections.deque()
        #: jobs of tasks that succeeded: (reservation, move, msg), written by the dispatcher
        #: with its acks (fetch.py, finishes.py)
        self.finishes: collections.deque[tuple] = collections.deque()
        self.again: collections.deque[tuple] = collections.deque()  # (script, keys, args)

    # --- what a job's end calls (outcomes.py, runner.py) ----------------------------------------
    def ack(self, res: Reservation) -> None:
        self.acks.append(res.member)

    def claim(self, payload: bytes, succeeded: bool) -> Reservation | None:
        raise AssertionError("a worker of many jobs starts none before its reservation is read")

    def send_acks(self) -> None:
        """(The dispatcher sends the acks: before it waits, and with its reserve calls.)"""

    def fail(self, res: Reservation, kind: str, score: float, payload: str | bytes,
             queue: str = "", task=None) -> int:
        keys, args = failure_call(self.keys, self.reserved_key, res.member, kind, score,
                                  payload, self.dead_timeout, self.dead_max_jobs, queue, task)
        return int(FAIL(self.r, keys, args))

    def finish_ahead(self, res: Reservation, task, msg: dict) -> None:
        """A job of a task succeeded: its ack and its state in the task go out with the
        dispatcher's acks."""
        self.finishes.append((res, task, msg))

    def send_ahead(self, script, keys: list, args: list, keep: bool) -> None:
        """A script call made now; if it fails, a ``keep`` call (a job's end) is run again by
        the dispatcher, another (a mark that only informs) is dropped. Never raises."""
        try:
            reply = script(self.r, keys, args)
        except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError) as e:
            if keep:
                self.again.append((script, keys, args))
            else:
                log.debug("a task mark failed and was dropped: %s", e)
            return
        if keep and reply == GONE:
            log.warning("a finished job had lost its reservation (recovered after a lease "
                        "expiry); it may run again")

    def run_script(self, script, keys: list, args: list):
        """A script call, its reply awaited (issue 21's guards)."""
        return script(self.r, keys, args)

    def renew_lease(self, lease_key: str, lease_ms: int) -> bool:
        return self.r.set(lease_key, "1", px=lease_ms, xx=True) is not None

    # --- the dispatcher's ------------------------------------------------------------------------
    def take_acks(self) -> list[bytes]:
        out = []
        while self.acks:
            out.append(self.acks.popleft())
        return out

    def take_finishes(self) -> list[tuple]:
        out = []
        while self.finishes:
            out.append(self.finishes.popleft())
        return out

    def run_again(self) -> None:
        """Run the ends that must take effect and did not, in order; raises as a call does
        (they stay to be run again)."""
        while self.again:
            script, keys, args = self.again[0]
            script(self.r, keys, args)
            self.again.popleft()

    def close(self) -> None:
        self.r.close()
