"""How a job's run ends in Redis: its ack, or the failure path, written atomically with the end
of its reservation.

Owns: the ack (or, for a job of a task, the ack and its state there in one script call); a
release (back to its queue, or scheduled), a bury, a business failure (JobFailed) and any other
failure (the retry policy's outcome, retry.py); a payload that is not a usable job (to dead
with the reason); retrying those writes through a Redis outage, and holding them reserved when
Redis refuses them (a ``retry``/``dead`` of another type: fail.lua), tried again later.

The Redis side is ``ends``: the worker's own Fetcher in a worker of one job at a time (its acks
ride with its next reserve call, its task marks are sent ahead), or a SharedEnds
(sharedends.py) in a worker of many jobs at once, which any of its threads may call. Does not
own running the job (runner.py) nor fetching (fetch.py).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import redis

from .. import events
from .. import ops, tracking
from . import retry
from .. import payload as codec
from ..errors import JobFailed, OverLimit, PayloadError, UnknownJobClass
from .reserved import GONE, REFUSED, Reservation
from .guards import Guards

log = logging.getLogger("queued.worker")

#: Redis outage backoff: first wait, cap (seconds).
BACKOFF_START, BACKOFF_MAX = 0.1, 5.0
#: Seconds between attempts to write a failure Redis refused (its target key holds another
#: type): the job stays reserved meanwhile (fail.lua).
HELD_RETRY = 5.0
#: A condition every worker meets is logged at most this often (seconds) by the whole daemon.
LOG_INTERVAL = 60.0


class Outcomes:
    def __init__(self, config, keys, slot: int, ends, notes, joblog,
                 outage: Callable[[Exception, float], None], stopping: Callable[[], bool]):
        self.config = config
        self.keys = keys
        self.slot = slot
        self.ends = ends
        self.notes = notes
        self.joblog = joblog
        self.outage = outage        # the worker's "Redis is away: log once, back off" step
        self.stopping = stopping
        #: Failures Redis refused to store (fail.lua): (reservation, kind, score, payload,
        #: queue, task move). Jobs of several threads may add to it: under ``_lock``.
        self.held: list[tuple[Reservation, str, float, str | bytes, str,
                              tracking.Move | None]] = []
        self._lock = threading.Lock()
        self.next_held_retry = 0.0
        #: expiring, unique and over-limit jobs (issue 21): each call behind a dict lookup
        self.guards = Guards(keys, ends, self._record)

    # --- the end of a run ------------------------------------------------------------------------
    def end(self, res: Reservation, msg: dict, cls, error: BaseException | None,
            task_id: str | None) -> str | None:
        """Write how the run ended; the name of the job's hook to call now, if any."""
        if error is None:
            self._succeeded(res, msg, task_id)
            return "after_succeeded"
        if isinstance(error, ops.Release):
            self._released(res, msg, error.delay, task_id)
        elif isinstance(error, ops.Bury):
            self._buried(res, msg, error.reason, task_id)
        elif isinstance(error, JobFailed):
            self._job_failed(res, msg, error, task_id)
        elif isinstance(error, OverLimit) and self.guards.overlimit(res, msg, error, task_id):
            pass  # rescheduled, no failure (past its limiter's reschedule: the retry path)
        else:
            self._failed(res, msg, cls, error, task_id)
            return "after_failed"
        return None

    def _succeeded(self, res: Reservation, msg: dict, task_id: str | None) -> None:
        claimed = self._claimed(res, True)
        if claimed is not None and "unique_for" in msg:
            self.guards.succeeded(msg)  # its lock goes before its ack (guards.py says why)
        if claimed is None:
            pass
        elif task_id is None:
            self.ends.ack(claimed)
        else:  # its ack and its state in the task, in one step, sent as acks are (finishes.py)
            self.ends.finish_ahead(claimed, tracking.Move(task_id, msg["jid"], "finished"), msg)

    def _job_failed(self, res: Reservation, msg: dict, error: JobFailed,
                    task_id: str | None) -> None:
        """A business failure (queued.JobFailed): never retried. A job of a task ends there,
        failed, with the reason; any other goes to dead, where an operator sees it."""
        if "unique_for" in msg:
            self.guards.ended_for_good(msg)
        if task_id is None:
            outcome = retry.failed_for_good(msg, error, res.queue)
            log.warning("failed: %s -> dead (JobFailed is not retried)", error.reason)
            self._record(res, "dead", outcome.score, outcome.payload)
            return
        log.warning("failed: %s (JobFailed: not retried)", error.reason)
        err = tracking.error_json("JobFailed", error.reason, final=True)
        self._record(res, "drop", time.time(), "",
                     task=tracking.Move(task_id, msg["jid"], "failed", err))

    def _released(self, res: Reservation, msg: dict, delay: float,
                  task_id: str | None) -> None:
        """The job released itself: back to its queue now, or scheduled ``delay`` seconds
        out; no failure counted, its release counted in the payload."""
        now = time.time()
        task = None if task_id is None else tracking.Move(task_id, msg["jid"], "enqueued")
        msg = {k: v for k, v in msg.items() if k not in (codec.CRASHES, codec.SUSPECT)}
        msg[ops.RELEASES] = _count(msg.get(ops.RELEASES)) + 1
        if delay > 0:
            log.info("released: runs again in %gs", delay)
            self._record(res, "later", now + delay, codec.dumps(msg), task=task)
        else:
            msg["enqueued_at"] = now
            log.info("released: back in queue %s", res.queue)
            self._record(res, "queue", now, codec.dumps(msg), queue=res.queue, task=task)

    def _buried(self, res: Reservation, msg: dict, reason: str, task_id: str | None) -> None:
        """The job buried itself: to dead now, with the reason, its bury counted."""
        outcome = retry.buried(msg, reason, res.queue)
        outcome.msg[ops.BURIES] = _count(msg.get(ops.BURIES)) + 1
        if "unique_for" in msg:
            self.guards.ended_for_good(msg)
        log.warning("buried: %s -> dead", reason)
        self._record(res, "dead", outcome.score, outcome.payload,
                     task=tracking.failure(task_id, outcome.msg, True, ops.Bury(reason)))

    def _failed(self, res: Reservation, msg: dict, cls, error: BaseException,
                task_id: str | None) -> None:
        outcome = retry.decide(msg, error, res.queue, job_class=cls,
                               max_retries=self.config.max_retries)
        if outcome.kind == "retry" and "expires_at" in msg and \
                self.guards.retry_past_deadline(res, msg, cls, task_id, outcome.score, error):
            events.report(error, {"job": msg, "queue": res.queue, "outcome": "expired"})
            return
        if outcome.kind != "retry" and "unique_for" in msg:
            self.guards.ended_for_good(msg)
        # The traceback helps with a bug in the job, and with a timeout (it shows where the
        # job was when it timed out); for an unknown class the one line says everything.
        trace = None if isinstance(error, UnknownJobClass) else error
        log.warning("fail: %s: %s -> %s", type(error).__qualname__, error,
                    retry.describe(outcome, self.config.max_retries), exc_info=trace)
        events.report(error, {"job": msg, "queue": res.queue, "outcome": outcome.kind})
        self._record(res, outcome.kind, outcome.score, outcome.payload,
                     task=tracking.failure(task_id, outcome.msg, outcome.kind != "retry", error))

    def reject(self, res: Reservation, msg: dict | None, err: PayloadError, writer) -> None:
        """A queue element that is not a usable job goes to dead, with the reason logged and,
        when it is a JSON object, written into it (error_class, error_message) so Sidekiq's
        Web UI and queued's tools show why; anything else goes as it came (Sidekiq does the
        same for invalid JSON). Nothing is dropped."""
        log.error("queue=%s unusable payload sent to dead: %s: %.200r", res.queue, err,
                  res.payload)
        now = time.time()
        data = res.payload if msg is None else retry.rejected(msg, err, res.queue, now).payload
        writer.begin("", res.queue, "?", None)
        self._record(res, "dead", now, data)
        writer.end(True)

    # --- writing it ------------------------------------------------------------------------------
    def _claimed(self, res: Reservation, succeeded: bool) -> Reservation | None:
        """The reservation to ack or fail: a job started as it landed gets it only now."""
        return res if res.member else self.ends.claim(res.payload, succeeded)

    def _record(self, res: Reservation, kind: str, score: float, data, queue: str = "",
                task: tracking.Move | None = None) -> None:
        """Write a failure (or a release, or the end of a job of a task); during a Redis
        outage keep trying (the job stays reserved until this succeeds, and the master
        requeues it if we exit first)."""
        claimed = self._claimed(res, False)
        if claimed is None:
            return  # not confirmed as ours: it is handed out again and runs again
        res = claimed
        backoff = BACKOFF_START
        while True:
            try:
                written = self.ends.fail(res, kind, score, data, queue, task)
                break
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                if self.stopping():
                    raise
                self.outage(e, backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
        if written == REFUSED:
            self._hold(res, kind, score, data, queue, task)
        elif written == GONE:
            # Its reservation was gone: another master put the job back after this master's
            # lease expired (frozen, or cut off from Redis). Writing the failure too would keep
            # it in two places; it runs again from its queue.
            log.warning("a job's reservation was gone as its run ended (recovered after a "
                        "lease expiry); its end (%s) is not recorded, it runs again", kind)

    def _hold(self, res: Reservation, kind: str, score: float, data, queue: str = "",
              task: tracking.Move | None = None) -> None:
        """The failure's target key holds another Redis type: the job stays reserved (marked,
        so it is not handed out again) and the write is tried again every HELD_RETRY seconds.
        If this worker exits first, the master puts the job back in its queue."""
        with self._lock:
            self.held.append((res, kind, score, data, queue, task))
            if not self.next_held_retry:
                self.next_held_retry = time.monotonic() + HELD_RETRY
            count = len(self.held)
        target = "retry" if kind == "retry" else "dead"
        if self.notes.due(("key", target), LOG_INTERVAL):
            key = {"later": self.keys.schedule, "queue": self.keys.queue(queue)}.get(
                kind, getattr(self.keys, target))
            if task is not None and kind in ("drop", "dead"):
                # (or the end would complete its task, whose callback queue is the bad key)
                key = ", ".join(tracking.blocked_keys(self.ends.redis, self.keys,
                                                      task.task_id) or [key])
            log.error("key %s holds another Redis type (WRONGTYPE): failed or released "
                      "jobs stay reserved until it is fixed (%d held by worker %d)",
                      key, count, self.slot)

    def write_held(self) -> None:
        """Try the held failures again, if it is time (the worker's loop calls this)."""
        if not self.held or time.monotonic() < self.next_held_retry:
            return
        with self._lock:
            held, self.held, self.next_held_retry = self.held, [], 0.0
        for i, (res, kind, score, data, queue, task) in enumerate(held):
            try:
                written = self.ends.fail(res, kind, score, data, queue, task)
            except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError):
                with self._lock:
                    self.held.extend(held[i:])  # the loop's outage handling takes it from here
                    self.next_held_retry = time.monotonic() + HELD_RETRY
                raise
            if written == REFUSED:
                self._hold(res, kind, score, data, queue, task)
            else:
                log.info("the failure of a held job (%s) is written now", kind)


def call_hook(job, name: str, *args):
    """A job's hook (after_succeeded, after_failed); what it returned (an awaitable, for an
    async hook of an async job: the caller awaits it). A broken hook fails nothing."""
    if job is None or name is None:
        return None
    try:
        return getattr(job, name)(*args)
    except Exception:  # noqa: BLE001 - a broken hook must not fail a finished job
        log.exception("%s hook raised", name)
        return None


def _count(value) -> int:
    """A payload's counter (release_count, bury_count) as an int: 0 when absent or unusable."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
