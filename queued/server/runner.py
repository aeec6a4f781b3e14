"""One job in a worker: from its reservation to its end, on a thread or on the event loop.

Owns: checking the payload (an unusable one goes to dead with the reason; one without a
``jid``, as some hand-written producers push, gets one and runs, as Sidekiq's server runs it),
finding the job class (ActiveJob's wrapped one included) and how it runs (``kind``: a sync
``perform`` on a thread, an ``async def perform`` as a task on the process's event loop, or a
class that opted out of threads with ``queued_options = {"threads": False}``, alone), its time
limit, the server middleware chain, the job's log context (every line logged while it runs
carries its class and jid), its record in the slot table, its metrics, and for a job of a task
its working mark and its ``say()`` lines. How the run ends in Redis is outcomes.py's.

Everything that belongs to one job lives in the job's own context (``contextvars``: per thread
and per asyncio task), never in this object or a module global: a worker of many jobs at once
runs many of them through this one Runner (a ``Lane`` names where each runs: its slot record,
its title, its time limit). A worker of one job at a time passes its one Lane, whose time limit
is SIGALRM (timeout.job_timeout), exactly as before threads existed.

Does not own fetching, signals or the worker's loop (worker.py, dispatch.py).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
import time
import traceback
from typing import Callable, NamedTuple

from .. import activejob, ops, tracking
from . import log as logsetup
from .. import payload as codec
from ..errors import PayloadError, UnknownJobClass
from .fetch import Reservation
from ..job import registry
from ..middleware import server_middleware
from .asynclimit import AsyncLimit, recancel_every
from .guards import rescheduled
from .outcomes import Outcomes, call_hook
from .timeout import job_timeout

log = logging.getLogger("queued.worker")

#: A job class whose recent runs took this long (or is new) counts as possibly slow: the acks of
#: the jobs finished before it are written before it starts (see _release_finished).
SLOW_JOB = 0.002
#: How a job runs (Runner.kind): a sync perform on a thread; an async one on the event loop;
#: alone, in the process's main thread (a class with ``threads: False``, or a suspect of a
#: crash that had many jobs in flight: recovery.py).
SYNC, ASYNC, SOLO = "sync", "async", "solo"

#: (task id, jid) of the job of a task running in this thread or task, for say().
_task: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "queued_task", default=None)


class _NoTitle:
    """A lane of a worker of many jobs at once: the process title counts its jobs instead."""

    def busy(self, job_class: str) -> None:
        pass

    def idle(self) -> None:
        pass


NO_TITLE = _NoTitle()


class Lane(NamedTuple):
    """Where one job runs. ``timeout`` is a context manager factory ``(seconds, description)``:
    SIGALRM's job_timeout in a main thread, a LaneTimer (timeout.py) on a job thread."""
    number: int
    writer: object
    title: object
    timeout: Callable


class _Run(NamedTuple):
    """What the start of a run found out, for its end."""
    res: Reservation
    msg: dict
    name: str
    shown: str  # the class to show (ActiveJob's wrapped one: codec.job_class_name)
    cls: type | None
    args: list
    kwargs: dict
    timeout: float | None
    task_id: str | None


class Runner:
    def __init__(self, config, keys, identity: str, slot: int, ends, lane: Lane, notes,
                 joblog, outage: Callable[[Exception, float], None],
                 stopping: Callable[[], bool], recorder=None, offload_ends: bool = False):
        self.config = config
        self.keys = keys
        self.slot = slot
        self.ends = ends          # fetch.Fetcher (one job at a time) or sharedends.SharedEnds
        self.lane = lane          # the worker's own lane (one job at a time)
        self.joblog = joblog
        self.recorder = recorder  # per-class metrics (metrics.Recorder), or None
        self.outcomes = Outcomes(config, keys, slot, ends, notes, joblog, outage, stopping)
        self.lease_key = keys.lease(identity)
        self.lease_ms = int(config.lease_timeout * 1000)
        ops.set_toucher(self._touch)
        ops.set_sayer(self._say)
        self.shapes: set[frozenset] = set()  # payload key sets seen without a jid (logged once)
        self._class_timeouts: dict[type, float | None] = {}
        self._kinds: dict[type, str] = {}
        self._durations: dict[str, float] = {}  # job class -> recent run time (seconds)
        #: Writes the ends of async jobs that need Redis (other async jobs share the loop):
        #: one thread, so they go out in order and need no more than one connection
        self.ends_executor = (concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="queued-ends") if offload_ends else None)
        self._loop: asyncio.AbstractEventLoop | None = None  # (one job at a time: its own)
        self.recancel = recancel_every(config.timeout_grace)  # (an async job past its limit)

    @property
    def held(self) -> list:
        return self.outcomes.held

    def write_held(self) -> None:
        self.outcomes.write_held()

    # --- one job -------------------------------------------------------------------------------
    def process(self, res: Reservation, lane: Lane | None = None, held: int = 0) -> None:
        """Run one job to its end on this thread. ``held``: jobs reserved behind it."""
        lane = lane or self.lane
        msg = self.parse(res, lane)
        if msg is None:
            return
        try:
            if self._kind(registry.lookup(_name(msg))) == ASYNC:
                self._run_on_loop(res, msg, lane)
            else:
                self.run(res, msg, lane, held)
        finally:
            logsetup.set_context("")

    def _run_on_loop(self, res: Reservation, msg: dict, lane: Lane) -> None:
        """An async job in a worker of one job at a time: on this process's own event loop
        (made at its first async job, kept for the next: its clients and pools live on)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self.run_async(res, msg, lane))

    def parse(self, res: Reservation, lane: Lane | None = None) -> dict | None:
        """The job as a dict, or None once an unusable payload went to dead."""
        msg = None
        try:
            if len(res.payload) > self.config.max_payload_bytes:
                raise PayloadError(f"payload is {len(res.payload):,} bytes, over the "
                                   f"max_payload_bytes limit of {self.config.max_payload_bytes:,}")
            msg = codec.loads(res.payload)
            codec.validate(msg)
        except PayloadError as e:
            self.outcomes.reject(res, msg, e, (lane or self.lane).writer)
            return None
        if "jid" not in msg:
            msg["jid"] = codec.derived_jid(res.payload)
            self._no_jid(res.queue, msg)
        return msg

    def kind(self, msg: dict) -> str:
        """SYNC, ASYNC or SOLO (see there), for a parsed job."""
        kind = self._kind(registry.lookup(_name(msg)))
        # a suspect of a crash of many jobs, or a job that killed its worker before: alone,
        # where another crash is its own (recovery.py)
        return SOLO if codec.SUSPECT in msg or codec.CRASHES in msg else kind

    def is_async(self, msg: dict) -> bool:
        return inspect.iscoroutinefunction(getattr(registry.lookup(_name(msg)), "perform", None))

    def _kind(self, cls) -> str:
        if cls is None:
            return SYNC  # (it fails at once: UnknownJobClass)
        kind = self._kinds.get(cls)
        if kind is None:  # options are fixed once the class exists
            if cls.get_options().get("threads") is False:
                kind = SOLO
            else:
                kind = ASYNC if inspect.iscoroutinefunction(cls.perform) else SYNC
            self._kinds[cls] = kind
        return kind

    def guarded(self, res: Reservation, msg: dict) -> bool:
        """Issue 21's checks as a job starts (guards.py): False when it is not to run now
        (expired, or put off: a copy holds its unique lock). Only for a job that has
        ``expires_at`` or ``unique_for``: the caller checks."""
        logsetup.set_context(logsetup.job_context(msg["class"], msg["jid"], queue=res.queue))
        return self.outcomes.guards.before(res, msg, registry.lookup(_name(msg)),
                                           tracking.task_id_of(msg))

    def run(self, res: Reservation, msg: dict, lane: Lane, held: int = 0) -> None:
        """A parsed job, sync, on this thread."""
        if ("expires_at" in msg or "unique_for" in msg) and not self.guarded(res, msg):
            return
        run = self._begin(res, msg, lane, held)
        start = time.monotonic()
        job, error = None, None
        try:
            job = self._instance(run)
            with lane.timeout(run.timeout, f"{msg['class']} (jid {msg['jid']})"):
                server_middleware.invoke(job, msg, res.queue,
                                         lambda: job.perform(*run.args, **run.kwargs))
        except BaseException as e:  # noqa: BLE001 - JobTimeout and SystemExit fail the job too
            error = _given_back(e)
            if lane.number:  # a lane's failure may take a while to write: see run_async
                lane.writer.ending()
        hook = self._ended(run, lane, error, time.monotonic() - start)
        call_hook(job, hook, *(() if error is None else (error,)))
        self._done(run, lane, error)

    async def run_async(self, res: Reservation, msg: dict, lane: Lane) -> None:
        """A parsed job whose perform is ``async def``, as a task on the event loop: its time
        limit cancels it; its end is written on a thread of the loop's executor (a Redis
        round trip, or a retry through an outage, must not hold up the loop)."""
        if "expires_at" in msg or "unique_for" in msg:  # (a Redis call: off the loop)
            if self.ends_executor is not None:
                ctx = contextvars.copy_context()
                go = await asyncio.get_running_loop().run_in_executor(
                    self.ends_executor, ctx.run, self.guarded, res, msg)
            else:
                go = self.guarded(res, msg)
            if not go:
                lane.writer.tick()  # (idle again: pool.py wrote it held as it was handed over)
                logsetup.set_context("")
                return
        run = self._begin(res, msg, lane, 0)
        start = time.monotonic()
        job, error = None, None
        # (cancelled at its limit and again until it ends: asynclimit.py)
        limit = (AsyncLimit(run.timeout, self.recancel, f"{msg['class']} (jid {msg['jid']})")
                 if run.timeout else None)
        try:
            job = self._instance(run)
            work = server_middleware.invoke_async(job, msg, res.queue,
                                                  lambda: job.perform(*run.args, **run.kwargs))
            if limit is not None:
                limit.inside = True
                work = limit.timed(work)
            await work
        except BaseException as e:  # noqa: BLE001 - as run()
            error = _given_back(e)
            if limit is not None and limit.expired and isinstance(e, asyncio.CancelledError):
                error = limit.error()
                error.__traceback__ = e.__traceback__
        finally:
            if limit is not None:
                limit.close()
        elapsed = time.monotonic() - start
        if self.ends_executor is not None and (error is not None or run.task_id is not None):
            # Its end is a Redis round trip (or retried through an outage): on the ends
            # thread, not the loop. Its run is over: its time limit no longer applies.
            lane.writer.ending()
            ctx = contextvars.copy_context()  # the job's log context goes with its end
            hook = await asyncio.get_running_loop().run_in_executor(
                self.ends_executor, ctx.run, self._ended, run, lane, error, elapsed)
        else:  # an ack (queued for the dispatcher: sharedends.py), or this job is alone
            hook = self._ended(run, lane, error, elapsed)
        result = call_hook(job, hook, *(() if error is None else (error,)))
        if inspect.isawaitable(result):
            try:
                await result
            except Exception:  # noqa: BLE001 - as call_hook
                log.exception("%s hook raised", hook)
        self._done(run, lane, error)
        logsetup.set_context("")

    def _begin(self, res: Reservation, msg: dict, lane: Lane, held: int) -> _Run:
        name, args, kwargs = msg["class"], msg["args"], {}
        if activejob.is_wrapped(msg):
            name, (args, kwargs) = activejob.job_name(msg), activejob.arguments(msg)
        cls = registry.lookup(name)
        self._release_finished(msg["class"])
        timeout = self._timeout(msg, cls)
        shown = codec.job_class_name(msg)
        lane.writer.begin(msg["jid"], res.queue, shown, timeout, held, res.member)
        lane.title.busy(shown)
        logsetup.set_context(logsetup.job_context(shown, msg["jid"], queue=res.queue))
        task_id = tracking.task_id_of(msg)
        if task_id is not None:
            self._working(task_id, msg, res.queue)
        return _Run(res, msg, name, shown, cls, args, kwargs, timeout, task_id)

    def _instance(self, run: _Run):
        if run.cls is None:
            raise UnknownJobClass(registry.missing(run.name))
        job = run.cls()
        job.jid, job.queue, job.msg, job.task_id = (run.msg["jid"], run.res.queue, run.msg,
                                                    run.task_id)
        return job

    def _ended(self, run: _Run, lane: Lane, error: BaseException | None,
               elapsed: float) -> str | None:
        """Its end written (outcomes.py); the hook to call."""
        _task.set(None)
        msg = run.msg
        self._learn(msg["class"], elapsed)
        logsetup.set_context(logsetup.job_context(run.shown, msg["jid"], elapsed,
                                                  run.res.queue))
        hook = self.outcomes.end(run.res, msg, run.cls, error, run.task_id)
        if self.recorder is not None:
            self.recorder.record(msg, run.res.queue, elapsed,
                                 error is not None and not isinstance(error, ops.Release)
                                 and not rescheduled(error))
        return hook

    def _done(self, run: _Run, lane: Lane, error: BaseException | None) -> None:
        if error is None and self.config.job_logging:
            self.joblog.done()
        lane.writer.end(error is not None and not isinstance(error, ops.Release)
                        and not rescheduled(error))

    # --- a job of a task, job operations ------------------------------------------------------
    def _working(self, task_id: str, msg: dict, queue: str) -> None:
        """Mark a job of a task working as it starts, sent ahead (no wait). Its state only: if
        Redis fails us here the job runs anyway, and its end writes its state for good."""
        _task.set((task_id, msg["jid"]))
        ks, args = tracking.mark_call(self.keys, tracking.Move(task_id, msg["jid"], "working"),
                                      tracking.record_json(msg, queue))
        self.ends.send_ahead(tracking.TASK_MARK, ks, args, keep=False)

    def _say(self, text: str) -> None:
        """ops.say inside a job of a task: a line in the job's message log there, sent ahead
        (a log past its cap ends with a line saying later ones were dropped)."""
        task = _task.get()
        if task is not None:
            ks, args = tracking.say_call(self.keys, *task, text)
            self.ends.send_ahead(tracking.TASK_SAY, ks, args, keep=False)

    def _touch(self) -> bool:
        """ops.touch inside a job: renew the master's lease from here (see ops.py)."""
        return self.ends.renew_lease(self.lease_key, self.lease_ms)

    # --- what the runner learns ----------------------------------------------------------------
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
            self.ends.send_acks()
            self.joblog.flush()

    def _learn(self, job_class: str, elapsed: float) -> None:
        """How long jobs of a class take: jumps up at once, decays slowly."""
        known = self._durations.get(job_class)
        self._durations[job_class] = (elapsed if known is None or elapsed > known
                                      else 0.9 * known + 0.1 * elapsed)

    def _timeout(self, msg: dict, cls) -> float | None:
        value = codec.seconds_of(msg.get("timeout"))  # (1e12 or 10**400: at most ten years)
        if value is not None:
            return value
        if cls is not None:
            if cls not in self._class_timeouts:  # options are fixed once the class exists
                value = cls.get_options().get("timeout")
                self._class_timeouts[cls] = float(value) if value else None
            if self._class_timeouts[cls]:
                return self._class_timeouts[cls]
        return self.config.job_timeout


def _given_back(error: BaseException) -> BaseException:
    """A job's error, and for a MemoryError the memory its frames hold given back first: the
    job's locals (the hog's chunks) live as long as its traceback, and the failure path that
    formats it (the log, the backtrace in the payload) then raised a second MemoryError that
    killed the worker (the job ended as WorkerKilled). The frames keep their code and line
    numbers, so the backtrace is whole; only their locals go (an error handler sees none)."""
    if isinstance(error, MemoryError):
        traceback.clear_frames(error.__traceback__)
    return error


def _name(msg: dict) -> str:
    return activejob.job_name(msg) if activejob.is_wrapped(msg) else msg["class"]


def single_lane(writer, title) -> Lane:
    """The one lane of a worker of one job at a time: its record, its title, SIGALRM."""
    return Lane(0, writer, title, job_timeout)
