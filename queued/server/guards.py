"""What a worker does for expiring jobs, unique jobs and over-limit jobs (issue 21), around the
run of one job. The runner calls in at four points, each behind a check that costs a job using
none of this a dict lookup (the daemon's per-job cost must not move: docs/benchmarks.md):

- ``before(res, msg, ...)`` as the job is taken, only for a payload with ``expires_at`` or
  ``unique_for``: a job past its deadline is dropped unrun (expiry.py); a unique job takes or
  confirms its lock (unique_start.lua), or gives it up at once with ``unique_until: "start"``,
  and if another jid holds it the job is put off (scheduled again, no failure): a copy of it
  is pending or running, and two never run at once. False: the job is not to run now.
- ``succeeded(msg)`` after a unique job's success: its lock goes, sent ahead of its ack, so a
  crash between the two leaves the job reserved (it runs again and takes the lock again), never
  a lock with no job (sidekiq-unique-jobs #14, #486, #955).
- ``ended_for_good(msg)`` when a unique job dies or is dropped (dead, ``retry: false``,
  JobFailed, bury): its lock goes. A retry, a release or an over-limit reschedule keeps it: the
  job is still pending (Sidekiq Enterprise #6448 let duplicates in while one waited to retry).
- ``overlimit(res, msg, error, task_id)`` when ``queued.OverLimit`` came out of ``perform``: the
  job is rescheduled, no failure, ``overrated`` counted in its payload, at the latest after
  Sidekiq Enterprise's backoff, then parked to be woken when its limiter has room
  (limit_park.lua); past the limiter's ``reschedule`` it takes the retry path (False).
- ``retry_past_deadline(...)``: a failure whose retry would come after the job's deadline
  expires it now instead (a retry never extends it).

The Redis side is the runner's ``ends`` (the worker's Fetcher, or what replaces it in a worker
of many jobs at once: any object with ``send_ahead`` and ``run_script``) and its ``record``
(the end of a reservation: fail.lua, retried through outages). Does not own running the job.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Callable

import redis

from .. import expiry, tracking, unique
from .. import payload as codec
from ..errors import OverLimit
from ..keys import Keys
from .scripts import EXPIRED

log = logging.getLogger("queued.worker")

#: The payload key counting a job's over-limit reschedules (Sidekiq Enterprise's).
OVERRATED = "overrated"
#: A job that found its unique lock held by another jid tries again within this many seconds
#: (or when that lock ends, if sooner), jittered: a copy pushed by a producer that cannot take
#: the lock at its push (Ruby, PHP) waits at most about this long after the other one ends.
DEFER_MAX = 5.0


def rescheduled(error: BaseException | None) -> bool:
    """Whether ``error`` ended the run with an over-limit reschedule (no failure to count)."""
    return isinstance(error, OverLimit) and getattr(error, "rescheduled", False)


class Guards:
    def __init__(self, keys: Keys, ends, record: Callable[..., None]):
        self.keys = keys
        self.ends = ends
        self.record = record  # (res, kind, score, data, queue="", task=None): fail.lua's end

    # --- as the job is taken ---------------------------------------------------------------------
    def before(self, res, msg: dict, job_class, task_id: str | None) -> bool:
        now = time.time()
        at = expiry.expired(msg, now)
        if at is not None:
            self.expire(res, msg, job_class, task_id, expiry.describe(at, now))
            return False
        if unique.period(msg) is None:
            return True
        jidless = msg["jid"] == codec.derived_jid(res.payload)  # (pushed without a jid)
        lock = self._lock(res, msg, jidless)
        left = self.ends.run_script(unique.UNIQUE_START,
                                    [lock.key, self.keys.counter("unique_deferred")],
                                    [lock.jid, lock.ttl_ms, "start" if lock.until_start
                                     else "hold"])
        if left == 0:
            return True
        self._defer(res, msg, task_id, left, jidless)
        return False

    def _lock(self, res, msg: dict, jidless: bool) -> unique.Lock:
        lock = unique.lock_of(self.keys, msg, queue=res.queue,
                              holder=unique.run_holder(msg["jid"]) if jidless else None)
        if unique.DIGEST not in msg:
            # (a Ruby or PHP producer's job: its later payloads carry the digest, so a change
            # of queue on a retry does not lose its lock; one without a "queue" key has it
            # from the queue it was taken from)
            msg[unique.DIGEST] = unique.digest(msg, res.queue)
        return lock

    def _defer(self, res, msg: dict, task_id: str | None, left_ms: int,
               jidless: bool) -> None:
        """Another jid holds the lock: this copy runs later, when it may be free. A copy
        pushed without a jid goes with a jid of its own: the jid made from its bytes is its
        twin's too, and a twin's lock would be its own."""
        wait = DEFER_MAX if left_ms < 0 else min(left_ms / 1000, DEFER_MAX)
        wait = max(0.05, wait * (0.5 + random.random() / 2))
        log.info("unique: another job holds this job's lock (%s); put off for %.1fs, not run "
                 "at the same time", msg.get(unique.DIGEST), wait)
        again = _fresh(msg)
        if jidless:
            again["jid"] = codec.new_jid()
        self.record(res, "later", time.time() + wait, codec.dumps(again),
                    task=_enqueued(task_id, msg))

    def expire(self, res, msg: dict, job_class, task_id: str | None, why: str) -> None:
        """Drop a job past its deadline: counted, its lock given up, its task told (a final
        error, class Expired), its class's on_expired hook called; never run (again)."""
        log.warning("expired: %s", why)
        keys = [self.keys.counter("expired")]
        if unique.period(msg) is not None:
            keys.append(self.keys.unique(unique.digest(msg, res.queue)))
        self.ends.send_ahead(EXPIRED, keys, [str(msg["jid"])], keep=True)
        move = None
        if task_id is not None:
            move = tracking.Move(task_id, msg["jid"], "error",
                                 tracking.error_json(expiry.ERROR_CLASS, why, final=True))
        self.record(res, "drop", time.time(), "", task=move)
        try:
            expiry.hook(job_class, msg)
        except Exception:  # noqa: BLE001 - a broken hook must not stop the worker
            log.exception("on_expired hook raised")

    # --- as it ends ----------------------------------------------------------------------------
    def succeeded(self, msg: dict) -> None:
        """A unique job succeeded: its lock goes (unless it went at the start)."""
        if msg.get(unique.UNIQUE_UNTIL) != "start":
            self.ended_for_good(msg)

    def ended_for_good(self, msg: dict) -> None:
        """A unique job will not run again (success, dead, dropped): its lock goes, if this
        jid still holds it (sent ahead: the job's own end follows on the same connection)."""
        pairs = unique.held_by(self.keys, [msg])
        if pairs:
            self.ends.send_ahead(unique.UNIQUE_RELEASE, *unique.release_call(pairs), keep=True)

    def overlimit(self, res, msg: dict, error: OverLimit, task_id: str | None) -> bool:
        """Reschedule a job whose limiter was over its limit; False when it has been
        rescheduled ``reschedule`` times already (it takes the retry path then)."""
        limiter = error.limiter
        overrated = _count(msg.get(OVERRATED)) + 1
        if overrated > limiter.reschedule:
            log.warning("over limit: %s; rescheduled %d times already: now a failure", error,
                        overrated - 1)
            return False
        again = _fresh(msg)
        again[OVERRATED] = overrated
        payload = codec.dumps(again)
        # Into the schedule at its latest time first, then parked (limit_park.lua brings it
        # forward): parked first, a release between the two found no schedule entry to wake,
        # and the job slept until its cap with the limiter idle (red team rt3 #3).
        cap = limiter_backoff(overrated)
        self.record(res, "later", time.time() + cap, payload, task=_enqueued(task_id, msg))
        ks, args = limiter.park_call(self.keys, payload, overrated, error.wait, cap=cap)
        try:
            wake = float(self.ends.run_script(limiter_park(), ks, args))
        except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError) as e:
            wake = time.time() + cap  # (it is in the schedule: it runs at its cap)
            log.warning("over limit: %s; could not park it (%s): it runs at its latest time",
                        error, e)
        log.info("over limit: %s; rescheduled (%d of %d), runs again in %.2fs at the latest",
                 error, overrated, limiter.reschedule, max(0.0, wake - time.time()))
        error.rescheduled = True
        return True

    def retry_past_deadline(self, res, msg: dict, job_class, task_id: str | None,
                            retry_at: float, error: BaseException) -> bool:
        """A failed job whose retry would come after its deadline: expired now instead."""
        at = expiry.deadline(msg)
        if at is None or retry_at <= at:
            return False
        self.expire(res, msg, job_class, task_id, f"failed ({type(error).__qualname__}: "
                    f"{error}), and its retry would come {retry_at - at:.1f}s after its "
                    "expires_at; dropped, not retried")
        return True


def limiter_park():
    from ..limiter import PARK  # (the limiter module is imported by job code anyway)
    return PARK


def limiter_backoff(overrated: int) -> float:
    from ..limiter import backoff
    return backoff(overrated)


def _fresh(msg: dict) -> dict:
    """The payload a job goes back with when its run did not count (a crash streak ends)."""
    return {k: v for k, v in msg.items() if k not in (codec.CRASHES, codec.SUSPECT)}


def _enqueued(task_id: str | None, msg: dict) -> tracking.Move | None:
    return None if task_id is None else tracking.Move(task_id, msg["jid"], "enqueued")


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
