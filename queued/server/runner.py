"""One job in a worker: from its reservation to its ack or its failure.

Owns: checking the payload (an unusable one goes to dead with the reason; one without a
``jid``, as some hand-written producers push, gets one and runs, as Sidekiq's server runs it),
finding the job class (ActiveJob's wrapped one included), its time limit, the server middleware
chain, the job's log context (every line logged while it runs carries its class and jid), the
line that ends it, the hooks, and the failure path: the retry policy's outcome written
atomically with the end of the reservation, retried through a Redis outage, and held reserved
when Redis refuses it (a ``retry``/``dead`` of another type: fail.lua). For a job of a task
(tracking.py): its state there, moved by the same script that ends its run, and its messages.

Does not own fetching, signals or the worker's loop (worker.py).
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import redis

from .. import events
from .. import activejob, ops, tracking
from . import retry
from . import log as logsetup
from .. import payload as codec
from ..errors import JobFailed, PayloadError, UnknownJobClass
from .fetch import GONE, REFUSED, Fetcher, Reservation
from ..job import registry
from ..middleware import server_middleware
from .timeout import job_timeout

log = logging.getLogger("queued.worker")

#: A job class whose recent runs took this long (or is new) counts as possibly slow: the acks of
#: the jobs finished before it are written before it starts (see _release_finished).
SLOW_JOB = 0.002
#: Redis outage backoff: first wait, cap (seconds).
BACKOFF_START, BACKOFF_MAX = 0.1, 5.0
#: Seconds between attempts to write a failure Redis refused (its target key holds another
#: type): the job stays reserved meanwhile (fail.lua).
HELD_RETRY = 5.0
#: A condition every worker meets is logged at most this often (seconds) by the whole daemon.
LOG_INTERVAL = 60.0


class Runner:
    def __init__(self, config, keys, slot: int, fetcher: Fetcher, writer, title, notes,
                 joblog, outage: Callable[[Exception, float], None],
                 stopping: Callable[[], bool], recorder=None):
        self.config = config
        self.keys = keys
        self.slot = slot
        self.fetcher = fetcher
        self.writer = writer
        self.title = title
        self.notes = notes
        self.joblog = joblog
        self.outage = outage        # the worker's "Redis is away: log once, back off" step
        self.stopping = stopping
        self.recorder = recorder  # per-class metrics (metrics.Recorder), or None
        #: Failures Redis refused to store (fail.lua): (reservation, kind, score, payload,
        #: queue, task move).
        self.held: list[tuple[Reservation, str, float, str | bytes, str,
                              tracking.Move | None]] = []
        self.lease_key = keys.lease(fetcher.identity)
        self.lease_ms = int(config.lease_timeout * 1000)
        ops.set_toucher(self._touch)
        ops.set_sayer(self._say)
        self.task: tuple[str, str] | None = None  # (task id, jid) of the job running now
        self.next_held_retry = 0.0
        self.shapes: set[frozenset] = set()  # payload key sets seen without a jid (logged once)
        self._class_timeouts: dict[type, float | None] = {}
        self._durations: dict[str, float] = {}  # job class -> recent run time (seconds)

    # --- one job -------------------------------------------------------------------------------
    def process(self, res: Reservation) -> None:
        msg = self._parse(res)
        if msg is None:
            return
        try:
            self._run(res, msg)
        finally:
            logsetup.set_context("")

    def _parse(self, res: Reservation) -> dict | None:
        """The job as a dict, or None once an unusable payload went to dead."""
        msg = None
        try:
            if len(res.payload) > self.config.max_payload_bytes:
                raise PayloadError(f"payload is {len(res.payload):,} bytes, over the "
                                   f"max_payload_bytes limit of {self.config.max_payload_bytes:,}")
            msg = codec.loads(res.payload)
            codec.validate(msg)
        except PayloadError as e:
            self._reject(res, msg, e)
            return None
        if "jid" not in msg:
            msg["jid"] = codec.derived_jid(res.payload)
            self._no_jid(res.queue, msg)
        return msg

    def _run(self, res: Reservation, msg: dict) -> None:
        name, args, kwargs = msg["class"], msg["args"], {}
        if activejob.is_wrapped(msg):
            name, (args, kwargs) = activejob.job_name(msg), activejob.arguments(msg)
        cls = registry.lookup(name)
        self._release_finished(msg["class"])
        timeout = self._timeout(msg, cls)
        shown = codec.job_class_name(msg)
        self.writer.begin(msg["jid"], res.queue, shown, timeout)
        self.title.busy(shown)
        logsetup.set_context(logsetup.job_context(shown, msg["jid"], queue=res.queue))
        task_id = tracking.task_id_of(msg)
        if task_id is not None:
            self._working(task_id, msg, res.queue)
        start = time.monotonic()
        job, error = None, None
        try:
            if cls is None:
                raise UnknownJobClass(registry.missing(name))
            job = cls()
            job.jid, job.queue, job.msg, job.task_id = msg["jid"], res.queue, msg, task_id
            with job_timeout(timeout, f"{msg['class']} (jid {msg['jid']})"):
                server_middleware.invoke(job, msg, res.queue,
                                         lambda: job.perform(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - JobTimeout and SystemExit fail the job too
            error = e
        self.task = None
        elapsed = time.monotonic() - start
        self._learn(msg["class"], elapsed)
        logsetup.set_context(logsetup.job_context(shown, msg["jid"], elapsed, res.queue))
        self._ended(res, msg, cls, job, error, task_id)
        failed = error is not None and not isinstance(error, ops.Release)
        if self.recorder is not None:
            self.recorder.record(msg, res.queue, elapsed, failed)
        self.writer.end(failed)

    def _ended(self, res: Reservation, msg: dict, cls, job, error: BaseException | None,
               task_id: str | None) -> None:
        if error is None:
            self._succeeded(res, msg, job, task_id)
        elif isinstance(error, ops.Release):
            self._released(res, msg, error.delay, task_id)
        elif isinstance(error, ops.Bury):
            self._buried(res, msg, error.reason, task_id)
        elif isinstance(error, JobFailed):
            self._job_failed(res, msg, error, task_id)
        else:
            self._failed(res, msg, cls, error, task_id)
            self._hook(job, "after_failed", error)

    def _succeeded(self, res: Reservation, msg: dict, job, task_id: str | None) -> None:
        claimed = self._claimed(res, True)
        if claimed is None:
            pass
        elif task_id is None:
            self.fetcher.ack(claimed)
        else:  # its ack and its state in the task, in one step, sent ahead like an ack
            self.fetcher.finish_ahead(claimed, tracking.Move(task_id, msg["jid"], "finished"))
        self._hook(job, "after_succeeded")
        if self.config.job_logging:
            self.joblog.done()

    def _working(self, task_id: str, msg: dict, queue: str) -> None:
        """Mark a job of a task working as it starts, sent ahead (no wait). Its state only: if
        Redis fails us here the job runs anyway, and its end writes its state for good."""
        self.task = (task_id, msg["jid"])
        ks, args = tracking.mark_call(self.keys, tracking.Move(task_id, msg["jid"], "working"),
                                      tracking.record_json(msg, queue))
        self.fetcher.send_ahead(tracking.TASK_MARK, ks, args, keep=False)

    def _say(self, text: str) -> None:
        """ops.say inside a job of a task: a line in the job's message log there, sent ahead
        (a log past its cap ends with a line saying later ones were dropped)."""
        if self.task is not None:
            ks, args = tracking.say_call(self.keys, *self.task, text)
            self.fetcher.send_ahead(tracking.TASK_SAY, ks, args, keep=False)

    def _job_failed(self, res: Reservation, msg: dict, error: JobFailed,
                    task_id: str | None) -> None:
        """A business failure (queued.JobFailed): never retried. A job of a task ends there,
        failed, with the reason; any other goes to dead, where an operator sees it."""
        if task_id is None:
            outcome = retry.failed_for_good(msg, error, res.queue)
            log.warning("failed: %s -> dead (JobFailed is not retried)", error.reason)
            self._record(res, "dead", outcome.score, outcome.payload)
            return
        log.warning("failed: %s (JobFailed: not retried)", error.reason)
        err = tracking.error_json("JobFailed", error.reason, final=True)
        self._record(res, "drop", time.time(), "",
                     task=tracking.Move(task_id, msg["jid"], "failed", err))

    def _touch(self) -> bool:
        """ops.touch inside a job: renew the master's lease from here (see ops.py)."""
        return self.fetcher.renew_lease(self.lease_key, self.lease_ms)

    def _released(self, res: Reservation, msg: dict, delay: float,
                  task_id: str | None) -> None:
        """The job released itself: back to its queue now, or scheduled ``delay`` seconds
        out; no failure counted, its release counted in the payload."""
        now = time.time()
        task = None if task_id is None else tracking.Move(task_id, msg["jid"], "enqueued")
        msg = {k: v for k, v in msg.items() if k != codec.CRASHES}
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
        log.warning("buried: %s -> dead", reason)
        self._record(res, "dead", outcome.score, outcome.payload,
                     task=tracking.failure(task_id, outcome.msg, True, ops.Bury(reason)))

    def _no_jid(self, queue: str, msg: dict) -> None:
        """A job without a jid runs under one made from its bytes (the master finds it by the
        same jid: recovery.current_job). Each producer shape (queue and keys) is logged once."""
        shape = frozenset((queue, *msg))
        if shape not in self.shapes:
            self.shapes.add(shape)
            log.warning("queue %s: a job without a \"jid\" (keys: %s) runs as jid %s; give "
                        "each job a jid (24 hex characters) so it can be followed",
                        queue, ", ".join(k for k in msg if k != "jid"), msg["jid"])

    def _release_finished(self, job_class: str) -> None:
        """Before a job that may run long, write the acks of the batch's finished jobs (one
        send, no wait), so they are not held reserved (and run again if this worker dies)
        while it runs. Before a job known to be short they ride with the batch's next
        reserve call instead: one write less per job is most of a short job's overhead."""
        if self._durations.get(job_class, SLOW_JOB) >= SLOW_JOB:
            self.fetcher.send_acks()
            self.joblog.flush()

    def _learn(self, job_class: str, elapsed: float) -> None:
        """How long jobs of a class take: jumps up at once, decays slowly."""
        known = self._durations.get(job_class)
        self._durations[job_class] = (elapsed if known is None or elapsed > known
                                      else 0.9 * known + 0.1 * elapsed)

    def _timeout(self, msg: dict, cls) -> float | None:
        value = msg.get("timeout")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
        if cls is not None:
            if cls not in self._class_timeouts:  # options are fixed once the class exists
                value = cls.get_options().get("timeout")
                self._class_timeouts[cls] = float(value) if value else None
            if self._class_timeouts[cls]:
                return self._class_timeouts[cls]
        return self.config.job_timeout

    def _hook(self, job, name: str, *args) -> None:
        if job is None:
            return
        try:
            getattr(job, name)(*args)
        except Exception:  # noqa: BLE001 - a broken hook must not fail a finished job
            log.exception("%s hook raised", name)

    # --- failures ------------------------------------------------------------------------------
    def _failed(self, res: Reservation, msg: dict, cls, error: BaseException,
                task_id: str | None) -> None:
        outcome = retry.decide(msg, error, res.queue, job_class=cls,
                               max_retries=self.config.max_retries)
        # The traceback helps with a bug in the job, and with a timeout (it shows where the
        # job was when SIGALRM came); for an unknown class the one line says everything.
        trace = None if isinstance(error, UnknownJobClass) else error
        log.warning("fail: %s: %s -> %s", type(error).__qualname__, error,
                    retry.describe(outcome, self.config.max_retries), exc_info=trace)
        events.report(error, {"job": msg, "queue": res.queue, "outcome": outcome.kind})
        self._record(res, outcome.kind, outcome.score, outcome.payload,
                     task=tracking.failure(task_id, outcome.msg, outcome.kind != "retry", error))

    def _reject(self, res: Reservation, msg: dict | None, err: PayloadError) -> None:
        """A queue element that is not a usable job goes to dead, with the reason logged and,
        when it is a JSON object, written into it (error_class, error_message) so Sidekiq's
        Web UI and queued's tools show why; anything else goes as it came (Sidekiq does the
        same for invalid JSON). Nothing is dropped."""
        log.error("queue=%s unusable payload sent to dead: %s: %.200r", res.queue, err,
                  res.payload)
        now = time.time()
        data = res.payload if msg is None else retry.rejected(msg, err, res.queue, now).payload
        self.writer.begin("", res.queue, "?", None)
        self._record(res, "dead", now, data)
        self.writer.end(True)

    def _claimed(self, res: Reservation, succeeded: bool) -> Reservation | None:
        """The reservation to ack or fail: a job started as it landed gets it only now."""
        return res if res.member else self.fetcher.claim(res.payload, succeeded)

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
                written = self.fetcher.fail(res, kind, score, data, queue, task)
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
        self.held.append((res, kind, score, data, queue, task))
        if not self.next_held_retry:
            self.next_held_retry = time.monotonic() + HELD_RETRY
        target = "retry" if kind == "retry" else "dead"
        if self.notes.due(("key", target), LOG_INTERVAL):
            key = {"later": self.keys.schedule, "queue": self.keys.queue(queue)}.get(
                kind, getattr(self.keys, target))
            if task is not None and kind in ("drop", "dead"):
                # (or the end would complete its task, whose callback queue is the bad key)
                key = ", ".join(tracking.blocked_keys(self.fetcher.redis, self.keys,
                                                      task.task_id) or [key])
            log.error("key %s holds another Redis type (WRONGTYPE): failed or released "
                      "jobs stay reserved until it is fixed (%d held by worker %d)",
                      key, len(self.held), self.slot)

    def write_held(self) -> None:
        """Try the held failures again, if it is time."""
        if not self.held or time.monotonic() < self.next_held_retry:
            return
        held, self.held, self.next_held_retry = self.held, [], 0.0
        for i, (res, kind, score, data, queue, task) in enumerate(held):
            try:
                written = self.fetcher.fail(res, kind, score, data, queue, task)
            except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError):
                self.held.extend(held[i:])  # the loop's outage handling takes it from here
                self.next_held_retry = time.monotonic() + HELD_RETRY
                raise
            if written == REFUSED:
                self._hold(res, kind, score, data, queue, task)
            else:
                log.info("the failure of a held job (%s) is written now", kind)


def _count(value) -> int:
    """A payload's counter (release_count, bury_count) as an int: 0 when absent or unusable."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
