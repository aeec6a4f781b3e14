"""The watchdog of a worker of many jobs at once: time limits on its job threads, and hangs seen
rather than guessed.

A thread of its own (it must not depend on the job threads or the event loop it watches):
- raises JobTimeout in a job thread whose job ran past its time limit (timeout.LaneTimer);
- measures its event loop's lag while async jobs run: a callback posted to the loop every
  PROBE_EVERY must run within LOOP_STALL, else the loop is stuck (an ``async def`` job that
  calls ``time.sleep`` or computes for seconds holds every other async job of the process);
  the job whose code the loop is in is found on the loop thread's stack;
- names a hang in the log before the master acts: a stuck loop (with the job blocking it and
  the loop thread's stack), and a job still running REPORT_AFTER past its time limit (its
  JobTimeout or cancellation ignored: a blocking C call, a swallowed exception), with its
  thread's stack. The master kills the process at timeout + ``timeout_grace``; the lag and
  the blocking job also go to the worker's record (slots.py, written by its dispatcher), so
  ``queuedctl processes`` shows them and the master charges that job, not its siblings.

Does not own the threads or the loop (pool.py) nor the kill (children.py).
"""
from __future__ import annotations

import logging
import sys
import threading
import time
import traceback

from .. import safepoints
from . import log as logsetup
from .pool import awaiting_stack

log = logging.getLogger("queued.worker")

#: How often the loop is probed while async jobs run (seconds).
PROBE_EVERY = 0.1
#: A loop that has not run a probe for this long is stuck (seconds): logged, with its stack.
LOOP_STALL = 1.0
#: The watchdog wakes at least this often (seconds), for the reports.
WAKE_EVERY = 0.5


class Watchdog:
    def __init__(self, slot: int, pool, grace: float):
        self.slot = slot
        self.pool = pool
        #: A job still running this long past its limit is reported (before the master's kill)
        self.report_after = max(0.1, min(1.0, grace / 2))
        self.cond = threading.Condition()
        self.wake_at = 0.0
        self.lag = 0.0            # seconds the loop has been late, now (0: on time)
        self.blocker = ""         # jid of the job the loop is stuck in, if known
        self._probe_sent = 0.0    # when the pending probe went out (0: none pending)
        self._stall_reported = False
        self._reported: set[tuple[int, str]] = set()  # (lane, jid) named already
        self._waits_reported: set[tuple[int, float]] = set()  # (lane, since) named already
        self.thread = threading.Thread(target=self._run, name="queued-watchdog", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def armed(self, deadline: float) -> None:
        """A lane armed its time limit: wake sooner if that comes first (LaneTimer.on_arm)."""
        if deadline < self.wake_at:
            with self.cond:
                self.cond.notify()

    def _run(self) -> None:
        while True:
            try:
                self._step(time.monotonic())
            except Exception:  # noqa: BLE001 - the watchdog must outlive any one report
                log.exception("worker %d: watchdog step failed", self.slot)
            now = time.monotonic()
            with self.cond:
                self.wake_at = self._next_wake(now)
                self.cond.wait(max(0.0, self.wake_at - now))

    def _next_wake(self, now: float) -> float:
        timers = self.pool.timers()
        # (a limit that fell due inside a guarded section is tried again at the next probe)
        deadlines = [t.deadline for t in timers if t.deadline and not t.fired and not t.due]
        wake = min([now + WAKE_EVERY, *deadlines])
        if self.pool.async_busy() or any(t.deferred for t in timers):
            wake = min(wake, now + PROBE_EVERY)
        return wake

    def _step(self, now: float) -> None:
        for timer in self.pool.timers():
            timer.expire(now)
        self._probe(now)
        self._overdue(now)
        self._waits(now)

    # --- a lock left held ------------------------------------------------------------------------
    def _waits(self, now: float) -> None:
        """Name once each job thread that has waited LOOP_STALL or more for a logging lock
        (safepoints.py notes it), with the stack of the thread that holds it: a thread stopped
        for good while holding one stops every thread's next log line (rt2 finding 2)."""
        waiting = set()
        for number, timer in self.pool.guards():
            seen = timer.waiting
            if seen is None or now - seen[2] < LOOP_STALL:
                continue
            lock, label, since = seen
            waiting.add((number, since))
            if (number, since) in self._waits_reported:
                continue
            self._waits_reported.add((number, since))
            owner = safepoints.owner_of(lock)
            holder = self.pool.lane_of(owner) if owner else None
            who = (f"job thread {holder}" if holder else
                   f"thread {owner}" if owner else "a thread that is gone")
            logsetup.write_record(
                "ERROR", log.name,
                f"worker {self.slot}: job thread {number} has waited {now - since:.1f}s for "
                f"{label}, held by {who}; every thread of this process that logs waits with "
                f"it; the holder's stack:\n{self._stack(owner)}")
        self._waits_reported &= waiting

    # --- the event loop ----------------------------------------------------------------------
    def _probe(self, now: float) -> None:
        loop = self.pool.loop
        if loop is None or not self.pool.async_busy():
            self.lag, self.blocker, self._probe_sent = 0.0, "", 0.0
            return
        if self._probe_sent:
            self.lag = now - self._probe_sent
            if self.lag >= LOOP_STALL:
                self.blocker = self._loop_job() or self.blocker
                if not self._stall_reported:
                    self._stall_reported = True
                    self._report_stall()
            return
        self._probe_sent = now
        loop.call_soon_threadsafe(self._pong)

    def _pong(self) -> None:
        """Run by the loop: it is turning."""
        if self._stall_reported:
            log.warning("worker %d: the event loop runs again after %.1fs", self.slot,
                        time.monotonic() - self._probe_sent)
        self.lag, self.blocker, self._probe_sent = 0.0, "", 0.0
        self._stall_reported = False

    def _loop_job(self) -> str:
        """The jid of the async job whose code the loop thread is in now, if any."""
        frame = sys._current_frames().get(self.pool.loop_ident)
        code = self.pool.async_code
        while frame is not None:
            if frame.f_code is code:
                msg = frame.f_locals.get("msg")
                return str(msg.get("jid", "")) if isinstance(msg, dict) else ""
            frame = frame.f_back
        return ""

    def _report_stall(self) -> None:
        stack = self._stack(self.pool.loop_ident)
        logsetup.write_record(
            "ERROR", log.name,
            f"worker {self.slot}: the event loop has not run for {self.lag:.1f}s: "
            f"{'job ' + self.blocker if self.blocker else 'a job'} holds it (an async job "
            f"must await, never block); every async job of this process waits; loop "
            f"thread's stack:\n{stack}")

    # --- jobs past their limit ----------------------------------------------------------------
    def _overdue(self, now: float) -> None:
        """Name once each job still running report_after past its limit, with its stack."""
        running = set()
        for v in self.pool.lane_views():
            if not v.busy:
                continue
            running.add((v.record, v.jid))
            late = now - v.started - v.timeout
            if not v.timeout or late < self.report_after or (v.record, v.jid) in self._reported:
                continue
            ident = self.pool.ident_of(v.record)
            if not ident and self.blocker and v.jid != self.blocker:
                continue  # it waits on the stuck loop, which _report_stall named
            self._reported.add((v.record, v.jid))
            if ident:
                what, where = "JobTimeout", f"thread {v.record}'s stack:\n{self._stack(ident)}"
            elif v.jid == self.blocker:
                what, where = "cancellation", (f"an async job holding the event loop: the loop "
                                               f"thread's stack:\n"
                                               f"{self._stack(self.pool.loop_ident)}")
            else:
                task = self.pool.tasks.get(v.record)
                what, where = "cancellation", (
                    f"an async job, cancelled again until it ends; where it awaits "
                    f"(innermost last):\n{awaiting_stack(task) if task else '(ended)'}")
            logsetup.write_record(
                "ERROR", log.name,
                f"worker {self.slot}: {v.job_class} jid={v.jid} is still running {late:.1f}s "
                f"past its {v.timeout:g}s timeout and has not stopped at its {what} (a "
                f"blocking call, a swallowed exception, or a long Redis command or log write "
                f"it cannot be interrupted in); the master kills this process at the grace's "
                f"end and puts its other jobs back; {where}")
        self._reported &= running

    @staticmethod
    def _stack(ident: int | None) -> str:
        frame = sys._current_frames().get(ident) if ident else None
        if frame is None:
            return "(none)"
        return "".join(traceback.format_stack(frame)).rstrip()
