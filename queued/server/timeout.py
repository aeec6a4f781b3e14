"""The soft job time limit: SIGALRM inside the worker raises JobTimeout in the job (a worker of
one job at a time, and a job that runs alone in a worker's main thread); LaneTimer on a job
thread of a worker of many jobs at once (see below; an async job's limit cancels its task:
runner.py).

This is the first of three layers (STYLE.md principle 4): if the job blocks SIGALRM or
swallows the exception, the master kills the worker at timeout + grace (master.py); if the
whole host dies, the master's lease expires (recovery.py).
"""
from __future__ import annotations

import ctypes
import signal
import threading
import time

from ..errors import JobTimeout


class job_timeout:
    """``with job_timeout(2.5): job.perform()``; ``None`` or 0 means no limit.

    The handler raises only while armed, so an alarm that fires in the instant after the job
    returned cannot turn a finished job into a failure. Re-entrant use is not supported (one
    job at a time per worker).
    """

    def __init__(self, seconds: float | None, description: str = "job"):
        self.seconds = seconds if seconds and seconds > 0 else None
        self.description = description
        self.armed = False
        self._previous = None

    def _fire(self, signum, frame):
        if self.armed:
            self.armed = False
            raise JobTimeout(f"{self.description} exceeded its {self.seconds:g}s timeout")

    def __enter__(self):
        if self.seconds is not None:
            self._previous = signal.signal(signal.SIGALRM, self._fire)
            self.armed = True
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        if self.seconds is not None:
            self.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)
        return False


# --- a job thread's time limit ---------------------------------------------------------------
#
# SIGALRM is per process and Python runs signal handlers in the main thread only, so a job on
# one of a worker's job threads gets its JobTimeout another way: the worker's watchdog thread
# (watchdog.py) raises it inside the job's thread with PyThreadState_SetAsyncExc, as
# Dramatiq's TimeLimit does. CPython raises such an exception when that thread next runs
# bytecode: at once for a job computing in Python, only once the call returns for a job
# blocked in C (time.sleep, a socket read without a timeout). That is what the master's kill
# at timeout + grace is for, as it is for a job that swallows the exception.

# (A pointer, not a py_object: None must pass as NULL, which clears a pending one. The call
# takes its own reference to the class.)
_set_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi))


def _timeout_error(message: str, timer: LaneTimer) -> type:
    """A JobTimeout class whose instances carry ``message`` (the call raises a class, which
    CPython instantiates without arguments, in the job's thread, once the exception is being
    handled there: then ``timer`` knows it was delivered)."""
    def __init__(self, *args):
        timer.delivered = True
        JobTimeout.__init__(self, *(args or (message,)))
    return type("JobTimeout", (JobTimeout,),
                {"__init__": __init__, "__module__": JobTimeout.__module__})


class LaneTimer:
    """One job lane's time limit: ``with timer(seconds, description): job.perform()``.

    ``expire()`` (the watchdog's) raises JobTimeout in the thread that entered, once, and only
    while armed: the exit disarms under the same lock, and takes back an exception that was
    raised in the thread but not yet delivered (the job returned first), so it can never
    surface in the runner's own code after the job. A job that returned, or that caught the
    exception and returned, has ended as it says.

    It is also the thread's guard (queued/safepoints.py, registered by pool.py): while the
    thread is inside a guarded section (a logging lock, a command of queued's Redis clients)
    a limit that falls due is not raised there but noted (``due``); the watchdog tries again
    at its next tick, and the thread's next entry into a guarded section raises it at that
    entry, where nothing is held yet (rt2 finding 2: raised inside logging's Handler.acquire,
    it left the handler's lock held and hung every thread of the process). An exception raised
    in the thread just before it entered a section, not yet delivered, is taken back and
    raised at the entry instead."""

    def __init__(self, on_arm=None):
        self.lock = threading.Lock()
        self.on_arm = on_arm      # the watchdog's wake-up, for a deadline sooner than it knew
        self.seconds = None
        self.description = "job"
        self.deadline = 0.0       # monotonic; 0 while not armed
        self.ident = 0
        self.fired = False
        self.delivered = False    # the fired exception reached the thread (see _timeout_error)
        self.due = False          # fell due inside a guarded section: raised at the next entry
        self.depth = 0            # guarded sections the thread is in now
        self.waiting = None       # (lock, its name, since) while waiting for a guarded lock

    def __call__(self, seconds: float | None, description: str = "job") -> LaneTimer:
        self.seconds = seconds if seconds and seconds > 0 else None
        self.description = description
        return self

    def __enter__(self):
        if self.seconds is not None:
            with self.lock:
                self.ident = threading.get_ident()
                self.fired = self.delivered = self.due = False
                self.depth = 0  # (the runner's code: no section is open here)
                self.deadline = time.monotonic() + self.seconds
            if self.on_arm is not None:
                self.on_arm(self.deadline)
        return self

    def __exit__(self, *exc):
        if self.seconds is not None:
            with self.lock:
                self.deadline = 0.0
                self.due = False
                self.depth = 0  # (the job's sections are closed: none can be open here)
                if self.fired:
                    _set_async_exc(self.ident, None)  # (NULL: clears one not yet raised)
        return False

    def _message(self) -> str:
        return f"{self.description} exceeded its {self.seconds:g}s timeout"

    def expire(self, now: float) -> bool:
        """Raise JobTimeout in the job's thread if its deadline has passed (once); inside a
        guarded section, note it due instead (the caller tries again later)."""
        with self.lock:
            if not self.deadline or self.fired or now < self.deadline:
                return False
            if self.depth:
                self.due = True
                return False
            self.fired, self.due = True, False
            _set_async_exc(self.ident, id(_timeout_error(self._message(), self)))
            return True

    @property
    def deferred(self) -> bool:
        """Past its deadline, not raised yet: the watchdog must try again soon."""
        return bool(self.deadline) and self.due and not self.fired

    # --- the thread's guard (safepoints.Guard) --------------------------------------------------
    def enter(self) -> None:
        """The thread enters a guarded section; a limit due (or raised and not yet delivered)
        is raised here, at the outermost entry, where nothing is held."""
        with self.lock:
            if self.depth or not self.deadline or not (
                    self.due or (self.fired and not self.delivered)):
                self.depth += 1
                return
            if self.fired:
                _set_async_exc(self.ident, None)  # (taken back: raised below instead)
            self.fired = self.delivered = True
            self.due = False
        raise JobTimeout(self._message())

    def leave(self) -> None:
        with self.lock:
            if self.depth:
                self.depth -= 1
