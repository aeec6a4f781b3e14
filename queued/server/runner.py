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
from dataclasses import dataclass
from typing import Callable

from .. import activejob, ops, tracking
from . import log as logsetup
from .. import payload as codec
from ..errors import PayloadError, UnknownJobClass
from .reserved import Reservation
from ..job import Job, registry
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


@dataclass(slots=True)
class Lane:
    """Where one job runs. ``timeout`` is a context manager factory ``(seconds, description)``:
    SIGALRM's job_timeout in a main thread, a LaneTimer (timeout.py) on a job thread."""
    number: int
    writer: object
    title: object
    timeout: Callable


@dataclass(slots=True)
class _Run:
    """What the start of a run found out, for its end."""
    res: Reservation
    msg: dict
    jid: str  # as it started (the payload's, or derived_jid's): its lines name this one
    name: str
    shown: str  # the class to show (ActiveJob's wrapped one: codec.job_class_name)
    cls: type | None
    args: list
    kwargs: dict
    timeout: float | None
    task_id: str | None
    info: "_ClassInfo"


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
        self._classes: dict[type | None, _ClassInfo] = {}
        self.job_logging = config.job_logging
        self.max_payload = config.max_payload_bytes
        self._durations: dict[str, float] = {}  # job class -> recent run time (seconds)
        #: Writes the ends of async jobs that need Redis (other async jobs share the loop):
        #: one thread, so they go out in order and need no more than one connection
        self.ends_executor = (concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="queued-ends") if offload_ends else None)
        self._loop: asyncio.AbstractEventLoop | None = None  # (one job at a time: its own)
        self.recancel = recancel_every(config.timeout_grace)  # (an async job past its limit)
        self.excuse = config.timeout_grace / 2  # (its limit moved for a loop held by others)

    @property
    def held(self) -> list:
        return self.outcomes.held

    def write_held(self) -> None:
        self.outcomes.write_held()

    # --- one job -------------------------------------------------------------------------------
    # A no-op job's path is short on purpose (issue 18: queued's own work per job was two
    # thirds of a no-op job's instructions): each lookup is made once per job, what a class
    # needs is learnt once per class (_ClassInfo), and a feature the job does not use (a time
    # limit, middleware, a hook, a task, the per-job log line) costs it a test, not a call.
    def process(self, res: Reservation, lane: Lane | None = None, held: int = 0) -> None:
        """Run one job to its end on this thread. ``held``: jobs reserved behind it."""
        lane = lane or self.lane
        msg = self.parse(res, lane)
        if msg is None:
            return
        try:
            found = _lookup(msg)
            if self._info(found[1]).kind == ASYNC:
                self._run_on_loop(res, msg, lane)
            else:
                self.run(res, msg, lane, held, found)
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
            if len(res.payload) > self.max_payload:
                raise PayloadError(f"payload is {len(res.payload):,} bytes, over the "
                                   f"max_payload_bytes limit of {self.max_payload:,}")
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
        kind = self._info(_lookup(msg)[1]).kind
        # a suspect of a crash of many jobs, or a job that killed its worker before: alone,
        # where another crash is its own (recovery.py)
        return SOLO if codec.SUSPECT in msg or codec.CRASHES in msg else kind

    def is_async(self, msg: dict) -> bool:
        return inspect.iscoroutinefunction(getattr(_lookup(msg)[1], "perform", None))

    def _info(self, cls) -> "_ClassInfo":
        info = self._classes.get(cls)
        if info is None:  # options are fixed once the class exists
            info = self._classes[cls] = _ClassInfo.of(cls)
        return info

    def guarded(self, res: Reservation, msg: dict) -> bool:
        """Issue 21's checks as a job starts (guards.py): False when it is not to run now
        (expired, or put off: a copy holds its unique lock). Only for a job that has
        ``expires_at`` or ``unique_for``: the caller checks."""
        logsetup.set_context(logsetup.job_context(msg["class"], msg["jid"], queue=res.queue))
        return self.outcomes.guards.before(res, msg, registry.lookup(_name(msg)),
                                           tracking.task_id_of(msg))

    def run(self, res: Reservation, msg: dict, lane: Lane, held: int = 0,
            found: tuple | None = None) -> None:
        """A parsed job, sync, on this thread. ``found``: what _lookup(msg) gave, if known."""
        if ("expires_at" in msg or "unique_for" in msg) and not self.guarded(res, msg):
            return
        run = self._begin(res, msg, lane, held, found)
        start = time.monotonic()
        job, error = None, None
        try:
            job = self._instance(run)
            if run.timeout:
                with lane.timeout(run.timeout, f"{msg['class']} (jid {msg['jid']})"):
                    server_middleware.invoke(job, msg, res.queue,
                                             lambda: job.perform(*run.args, **run.kwargs))
            elif server_middleware.entries:
                server_middleware.invoke(job, msg, res.queue,
                                         lambda: job.perform(*run.args, **run.kwargs))
            else:
                job.perform(*run.args, **run.kwargs)
        except BaseException as e:  # noqa: BLE001 - JobTimeout and SystemExit fail the job too
            error = _given_back(e)
            if lane.number:  # a lane's failure may take a while to write: see run_async
                lane.writer.ending()
        elapsed = time.monotonic() - start
        if error is None and self.job_logging:  # (before its ack is queued: see log.py)
            self.joblog.done(run.shown, run.jid, elapsed, run.res)
        hook = self._ended(run, lane, error, elapsed)
        if hook is not None and job is not None and hook in run.info.hooks:
            call_hook(job, hook, *(() if error is None else (error,)))
        self._done(lane, error)

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
        limit = (AsyncLimit(run.timeout, self.recancel, f"{msg['class']} (jid {msg['jid']})",
                            self.excuse)
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
        if error is None and self.job_logging:  # (before its ack is queued: see log.py)
            self.joblog.done(run.shown, run.jid, elapsed, run.res)
        if self.ends_executor is not None and (error is not None or "unique_for" in msg):
            # Its end is a Redis round trip (or retried through an outage; a unique job's
            # lock release): on the ends thread, not the loop. Its run is over: its time
            # limit no longer applies. (A success, of a task's job too, is queued for the
            # dispatcher: sharedends.py.)
            lane.writer.ending()
            ctx = contextvars.copy_context()  # the job's log context goes with its end
            hook = await _past_cancels(asyncio.get_running_loop().run_in_executor(
                self.ends_executor, ctx.run, self._ended, run, lane, error, elapsed))
        else:  # an ack (queued for the dispatcher: sharedends.py), or this job is alone
            hook = self._ended(run, lane, error, elapsed)
        result = call_hook(job, hook, *(() if error is None else (error,)))
        if inspect.isawaitable(result):
            try:
                await result
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - as call_hook
                log.exception("%s hook raised", hook)
        self._done(lane, error)
        logsetup.set_context("")

    def _begin(self, res: Reservation, msg: dict, lane: Lane, held: int,
               found: tuple | None = None) -> _Run:
        name, cls, wrapped = found or _lookup(msg)
        if wrapped:
            args, kwargs = activejob.arguments(msg)
        else:
            args, kwargs = msg["args"], _NO_KWARGS
        info = self._info(cls)
        job_class = msg["class"]
        slow = self._durations.get(job_class, SLOW_JOB) >= SLOW_JOB
        if slow:
            self._release_finished()
        timeout = self._timeout(msg, info)
        jid = msg["jid"]
        # (codec.job_class_name: the class to show; "class" is a non-empty str: validate)
        shown = msg.get("display_class") or msg.get("wrapped") or job_class
        if shown.__class__ is not str:
            shown = str(shown)
        lane.writer.begin(jid, res.queue, shown, timeout, held, res.member)
        lane.title.busy(shown)
        logsetup.set_context(logsetup.job_context(shown, jid, queue=res.queue))
        task_id = None
        if tracking.TASK_FIELD in msg:
            task_id = tracking.task_id_of(msg)
            if task_id is not None:
                _task.set((task_id, jid))  # (for say())
                if slow:
                    self._working(task_id, msg, res.queue)
        return _Run(res, msg, jid, name, shown, cls, args, kwargs, timeout, task_id, info)

    def _instance(self, run: _Run):
        cls = run.cls  # (called as a local: a call straight off a slot is not cached)
        if cls is None:
            raise UnknownJobClass(registry.missing(run.name))
        job = cls()
        job.jid, job.queue, job.msg, job.task_id = run.jid, run.res.queue, run.msg, run.task_id
        return job

    def _ended(self, run: _Run, lane: Lane, error: BaseException | None,
               elapsed: float) -> str | None:
        """Its end written (outcomes.py); the hook to call."""
        msg, res = run.msg, run.res
        if run.task_id is not None:
            _task.set(None)
        job_class = msg["class"]
        known = self._durations.get(job_class)  # (how long jobs of a class take: jumps up
        self._durations[job_class] = (          # at once, decays slowly)
            elapsed if known is None or elapsed > known else 0.9 * known + 0.1 * elapsed)
        if error is not None or run.info.hooks:
            # the lines logged from here on (its failure, its hook's) say how long it ran
            # (the done line was made from the job's own figures: run)
            logsetup.set_context(logsetup.job_context(run.shown, run.jid, elapsed,
                                                      res.queue))
        if error is None and run.task_id is None and res.member and "unique_for" not in msg:
            self.ends.ack(res)  # (outcomes.end's common case, without its calls)
            hook = "after_succeeded"
        else:
            hook = self.outcomes.end(res, msg, run.cls, error, run.task_id)
        if self.recorder is not None:
            self.recorder.record(msg, res.queue, elapsed,
                                 error is not None and not isinstance(error, ops.Release)
                                 and not rescheduled(error))
            if error is not None:
                # (any end but a success was written at once, not with the acks: its counts
                # go out now too, or a kill -9 would lose them with nothing to run again)
                self.recorder.flush()
        return hook

    @staticmethod
    def _done(lane: Lane, error: BaseException | None) -> None:
        """The lane's record: idle again (its done line was made before its end: run)."""
        if error is None:
            lane.writer.end(False)
        else:  # (an over-limit reschedule is no failure: issue 21)
            lane.writer.end(not isinstance(error, ops.Release) and not rescheduled(error))

    # --- a job of a task, job operations ------------------------------------------------------
    def _working(self, task_id: str, msg: dict, queue: str) -> None:
        """Mark a job of a task that may run long working as it starts, sent ahead (no wait).
        Its state only: if Redis fails us here the job runs anyway, and its end writes its
        state for good. A job of a class known to be short (under SLOW_JOB) is not marked:
        its end follows within milliseconds, and a mark per job was a third of what a task's
        job cost (issue 18); its end writes its record then if its task had none."""
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

    def _release_finished(self) -> None:
        """Before a job that may run long (its class is new, or recently took SLOW_JOB or
        more), write the acks of the batch's finished jobs (one send, no wait), so they are
        not held reserved (and run again if this worker dies) while it runs. Before a job
        known to be short they ride with the batch's next reserve call instead: one write
        less per job is most of a short job's overhead."""
        self.ends.send_acks()
        self.flush_ends()

    def flush_ends(self) -> None:
        """What the ends of the jobs finished so far hold in this process goes out: their done
        lines (one write, log.py) and their counts (metrics.HeldRecorder). The worker calls it
        as their acks go out and when its batch ends."""
        self.joblog.flush()
        if self.recorder is not None:
            self.recorder.flush()

    def _timeout(self, msg: dict, info: "_ClassInfo") -> float | None:
        value = msg.get("timeout")
        if value is not None:  # (1e12 or 10**400: at most ten years)
            value = codec.seconds_of(value)
            if value is not None:
                return value
        return info.timeout or self.config.job_timeout


@dataclass(slots=True)
class _ClassInfo:
    """What the runner needs of a job class, learnt at its first job (a class's options
    are fixed once it exists). For None (no such class) the defaults."""
    kind: str
    timeout: float | None  # its own time limit (queued_options), else None
    hooks: frozenset       # the hooks it overrides (Job's own do nothing)

    @classmethod
    def of(cls, job_class) -> "_ClassInfo":
        if job_class is None:
            return cls(SYNC, None, frozenset())  # (it fails at once: UnknownJobClass)
        options = job_class.get_options()
        if options.get("threads") is False:
            kind = SOLO
        else:
            kind = ASYNC if inspect.iscoroutinefunction(job_class.perform) else SYNC
        value = options.get("timeout")
        hooks = frozenset(name for name in ("after_succeeded", "after_failed")
                          if getattr(job_class, name, None) is not getattr(Job, name))
        return cls(kind, float(value) if value else None, hooks)


#: (a job's keyword arguments when it has none: never changed, ** copies it)
_NO_KWARGS: dict = {}


def _lookup(msg: dict) -> tuple[str, type | None, bool]:
    """(the class name to run, its class or None, whether ActiveJob wraps it)."""
    name = msg["class"]
    if name in activejob.WRAPPERS and activejob.is_wrapped(msg):
        name = activejob.job_name(msg)
        return name, registry.lookup(name), True
    return name, registry.lookup(name), False


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


async def _past_cancels(fut):
    """The result of ``fut`` (the job's end, written on the ends thread), however many cancels
    the job left pending on its own task: one that cancelled its task and swallowed it, then
    failed, had the write's await cancelled, so its end was not counted and its lane stayed
    shown busy (RT7). The write runs on whatever happens here; this only waits for it."""
    while True:
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if fut.done():
                return fut.result()
