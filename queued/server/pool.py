"""The threads and the event loop of a worker of many jobs at once (``threads`` > 1).

A worker has ``threads`` lanes, numbered from 1: at most that many jobs run at once, sync and
async together. A lane is free, or runs one job: a sync one on the lane's own job thread, an
``async def`` one as a task on the process's one event loop (so an aiohttp session or an async
database pool lives once per process), while that lane's thread waits. Each lane has its own
record in the slot table and its own time limit; the lowest free lane is taken first, so the
threads that run are few and warm, and a thread (or the loop's thread) is started only when a
job first needs it. A thread fires the ``thread_start`` event before its first job.

The dispatcher (dispatch.py, the main thread) is the only one to take or free a lane, except
that a thread whose sync job ended goes on with a job the dispatcher holds ready (``ready``)
instead of going back to it first (one thread hand-off and a round trip less between two jobs
of a lane); the threads and the loop tell it a job ended through ``inbox`` (a SimpleQueue, which a signal
handler may also put into). Threads and the loop are daemons: the process leaves through
os._exit once its dispatcher has waited for every job (worker.py).

Does not own fetching (dispatch.py) nor running one job (runner.py).
"""
from __future__ import annotations

import asyncio
import collections
import heapq
import logging
import queue
import sys
import threading
import time
import traceback

from .. import events, safepoints
from .. import payload as codec
from . import log as logsetup
from .runner import NO_TITLE, Lane, Runner
from .slots import LaneWriter
from .timeout import LaneTimer

log = logging.getLogger("queued.worker")


class Pool:
    def __init__(self, size: int, runner: Runner, table, slot: int, pid: int,
                 inbox: queue.SimpleQueue, on_arm=None):
        self.size = size
        self.runner = runner
        self.table = table
        self.slot = slot
        self.inbox = inbox
        self.lanes = {n: Lane(n, LaneWriter(table, slot, pid, n), NO_TITLE, LaneTimer(on_arm))
                      for n in range(1, size + 1)}
        self._free = list(self.lanes)  # a heap: the lowest free lane is taken first
        self.kinds: dict[int, str] = {}  # lane -> "sync" or "async", while busy
        self._inboxes: dict[int, queue.SimpleQueue] = {}
        self._threads: dict[int, threading.Thread] = {}
        self.tasks: dict[int, asyncio.Task] = {}  # lane -> its async job's task, while it runs
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_ident = 0
        self.async_code = Runner.run_async.__code__  # the watchdog finds a loop's job by it
        # Sync jobs reserved ahead of the free lanes, parsed, (res, msg, reserved at): a lane
        # whose job ends goes on with the first at once, while ``taking`` (dispatch.py).
        self.ready: collections.deque = collections.deque()
        self.ready_async: collections.deque = collections.deque()  # the same, async jobs
        self.taking = False
        self.stopping = lambda: False  # (the dispatcher's: TERM is seen before its next turn)
        # a job thread's JobTimeout never lands inside a logging lock (safepoints.py)
        safepoints.guard_logging()

    # --- lanes (the dispatcher's) ------------------------------------------------------------
    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def busy(self) -> int:
        return self.size - len(self._free)

    def take(self) -> Lane:
        return self.lanes[heapq.heappop(self._free)]

    def release(self, number: int) -> None:
        self.kinds.pop(number, None)
        heapq.heappush(self._free, number)

    def run_sync(self, lane: Lane, res, msg: dict) -> None:
        self.kinds[lane.number] = "sync"
        box = self._inboxes.get(lane.number)
        if box is None:
            box = self._inboxes[lane.number] = queue.SimpleQueue()
            thread = threading.Thread(target=self._thread, args=(lane, box), daemon=True,
                                      name=f"queued-job-{lane.number}")
            self._threads[lane.number] = thread
            thread.start()
        box.put((res, msg))

    def run_async(self, lane: Lane, res, msg: dict) -> None:
        self.kinds[lane.number] = "async"
        if self.loop is None:
            self._start_loop()
        self._held_by(lane, res, msg)
        asyncio.run_coroutine_threadsafe(self._task(lane, res, msg), self.loop)

    @staticmethod
    def _held_by(lane: Lane, res, msg: dict) -> None:
        # Its lane's record says it is held before the loop starts it (no time limit yet: it
        # runs from its start), so a job waiting on a blocked loop is counted and shown
        # (rt2 finding 6). Written before the hand-off: the loop writes the record after.
        lane.writer.begin(str(msg.get("jid", "")), res.queue, codec.job_class_name(msg), None,
                          0, res.member)

    # --- the threads -------------------------------------------------------------------------
    def _thread(self, lane: Lane, box: queue.SimpleQueue) -> None:
        logsetup.set_lane(lane.number)
        safepoints.register(lane.timeout)  # (its JobTimeout lands in job code only)
        events.fire("thread_start")
        while True:
            res, msg = box.get()
            while True:
                began = time.monotonic()
                try:
                    self.runner.run(res, msg, lane)
                except BaseException:  # noqa: BLE001 - the job is still reserved: the master has it
                    log.exception("worker %d lane %d: the end of a job could not be written",
                                  self.slot, lane.number)
                finally:
                    logsetup.set_context("")
                took = time.monotonic() - began
                nxt = self._next_ready()
                if nxt is None:
                    break
                self.inbox.put(("next", lane.number, took))
                res, msg = nxt
            self.inbox.put(("done", lane.number, took))

    def _next_ready(self, ready=None):
        """A job held ready for a lane to go on with (the dispatcher's; ``ready``: the sync
        ones by default), while it lets lanes take them; else None. (deque.popleft is atomic:
        a job is taken by one lane, or by the dispatcher putting them back, never both.)"""
        if not self.taking or self.stopping():
            return None
        try:
            res, msg, _ = (self.ready if ready is None else ready).popleft()
        except IndexError:
            return None
        return res, msg

    async def _task(self, lane: Lane, res, msg: dict) -> None:
        logsetup.set_lane(lane.number)  # (this task's own context)
        self.tasks[lane.number] = asyncio.current_task()
        began = time.monotonic()
        try:
            await self.runner.run_async(res, msg, lane)
        except BaseException:  # noqa: BLE001 - as _thread
            log.exception("worker %d lane %d: the end of an async job could not be written",
                          self.slot, lane.number)
        finally:
            self.tasks.pop(lane.number, None)
            took = time.monotonic() - began
            nxt = self._next_ready(self.ready_async)
            if nxt is None:
                self.inbox.put(("done", lane.number, took))
            else:
                # its lane goes on with a held async job, as a task of its own (a cancel
                # meant for this job's task never reaches the next one)
                self.inbox.put(("next", lane.number, took))
                self._held_by(lane, *nxt)
                self.loop.create_task(self._task(lane, *nxt))

    def _start_loop(self) -> None:
        ready = threading.Event()
        self.loop = asyncio.new_event_loop()

        def run() -> None:
            self.loop_ident = threading.get_ident()
            asyncio.set_event_loop(self.loop)
            ready.set()
            events.fire("thread_start")
            self.loop.run_forever()

        threading.Thread(target=run, name="queued-loop", daemon=True).start()
        ready.wait()

    # --- what the watchdog and a TTIN dump look at ---------------------------------------------
    def timers(self) -> list[LaneTimer]:
        return [self.lanes[n].timeout for n in list(self._threads)]

    def guards(self) -> list[tuple[int, LaneTimer]]:
        """(lane, its timer) of every lane with a thread."""
        return [(n, self.lanes[n].timeout) for n in list(self._threads)]

    def lane_of(self, ident: int) -> int | None:
        """The lane whose thread is ``ident``, if any."""
        return next((n for n, t in list(self._threads.items()) if t.ident == ident), None)

    def async_busy(self) -> int:
        return sum(1 for kind in list(self.kinds.values()) if kind == "async")

    def lane_views(self) -> list:
        return self.table.slot_views(self.slot)[1:]

    def ident_of(self, number: int) -> int:
        """The thread running lane ``number``'s sync job now (0: none, or an async job)."""
        thread = self._threads.get(number)
        return thread.ident if thread is not None and self.kinds.get(number) == "sync" else 0

    def describe(self) -> str:
        """Every job thread's stack and the event loop's tasks (TTIN)."""
        frames = sys._current_frames()
        parts = []
        for number, thread in sorted(self._threads.items()):
            frame = frames.get(thread.ident)
            state = self.kinds.get(number, "idle")
            parts.append(f"Thread queued-job-{number} ({state}):\n" + (
                "".join(traceback.format_stack(frame)).rstrip() if frame else "(gone)"))
        if self.loop is not None:
            frame = frames.get(self.loop_ident)
            parts.append("Thread queued-loop:\n" + (
                "".join(traceback.format_stack(frame)).rstrip() if frame else "(gone)"))
            parts.append(self._tasks())
        return "\n".join(parts)

    def _tasks(self) -> str:
        try:
            tasks = list(asyncio.all_tasks(self.loop))
        except RuntimeError:  # (the set changed while we read it: the loop runs on)
            return "Event loop tasks: (changing; ask again)"
        lines = [f"Event loop tasks ({len(tasks)}):"]
        for task in tasks:
            lines.append(f"Task {task.get_name()} (awaiting, innermost last):")
            lines.append("".join(traceback.format_list(_awaiting(task.get_coro()))).rstrip())
        return "\n".join(lines)


def awaiting_stack(task) -> str:
    """Where a task's coroutine waits, innermost last (read from another thread: a task
    that moves on meanwhile shows where it was)."""
    try:
        return "".join(traceback.format_list(_awaiting(task.get_coro()))).rstrip() or "(none)"
    except (AttributeError, ValueError, RuntimeError):
        return "(changing; ask again)"


def _awaiting(coro) -> traceback.StackSummary:
    """The frames of a suspended coroutine and of each one it awaits, down to where it waits
    (Task.get_stack stops at the outermost)."""
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            frames.append((frame, frame.f_lineno))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return traceback.StackSummary.extract(frames)
