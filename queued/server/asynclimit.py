"""An async job's time limit: its task is cancelled at the limit, and again every quarter of
``timeout_grace`` (at least RECANCEL_MIN apart) until it ends, before the master's kill at
limit + grace.

One cancel was not enough: Python 3.11 with redis-py 8 drops a cancel that races a command's
write (redis-py's send wraps it in asyncio.wait_for), so a well-behaved job looping on
``get_async_redis()`` ran on past its limit in 8 runs of 10, and the master killed its whole
process, putting every other job of it back (the red team's rt2 finding 1).

Not at once again: a job that did get the cancel runs its cleanup (a ``finally`` that awaits,
an ``async with`` closing), and a cancel every tick cut those short (the 1,000-job test lost
400 cleanups waiting for a pool connection); a quarter of the grace is its cleanup's time.

A cancel is made only while the task waits inside the job's own code (``inside``: the runner
sets it around the middleware and ``perform``), so a CancelledError never lands in the runner's
writing of the job's end; when the run ends every cancel it made is taken back
(``Task.uncancel``), so nothing of them is left for what the task does next. (A cancel made
while the task is suspended is delivered at the very await it is suspended in: the loop runs
this callback and the task's steps one at a time.)

All of it runs on the event loop's thread. Does not own the loop (pool.py), nor the job's run
(runner.py), nor how a stuck loop is seen (watchdog.py).
"""
from __future__ import annotations

import asyncio

#: A job past its limit is cancelled again at most this often (seconds): the watchdog's probe
#: period.
RECANCEL_MIN = 0.1


def recancel_every(grace: float) -> float:
    """Seconds between the cancels of a job past its limit, for ``timeout_grace``."""
    return max(RECANCEL_MIN, grace / 4)


class AsyncLimit:
    """The time limit of the async job running in the current task (``seconds`` > 0)."""

    def __init__(self, seconds: float, every: float = RECANCEL_MIN):
        self.seconds = seconds
        self.every = every        # seconds between two cancels (recancel_every)
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.expired = False
        self.cancels = 0
        self.inside = False       # the task waits inside the job's own code
        self.handle: asyncio.TimerHandle | None = self.loop.call_later(seconds, self._due)

    def _due(self) -> None:
        self.handle = None
        if self.task.done():
            return
        self.expired = True
        if self.inside:
            self.cancels += 1
            self.task.cancel()
        self.handle = self.loop.call_later(self.every, self._due)

    def close(self) -> None:
        """The job's code is done (or cancelled for good): no more cancels, and none left."""
        self.inside = False
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if hasattr(self.task, "uncancel"):  # (3.11: a cancelled task counts its cancels)
            for _ in range(self.cancels):
                self.task.uncancel()
        self.cancels = 0
