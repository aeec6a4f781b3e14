"""The soft job time limit: SIGALRM inside the worker raises JobTimeout in the job.

This is the first of three layers (STYLE.md principle 4): if the job blocks SIGALRM or
swallows the exception, the master kills the worker at timeout + grace (master.py); if the
whole host dies, the master's lease expires (recovery.py).
"""
from __future__ import annotations

import signal

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
