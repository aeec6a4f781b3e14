"""An async job's time limit: its task is cancelled at the limit, and again every quarter of
``timeout_grace`` (at least RECANCEL_MIN apart) until it ends, before the master's kill at
limit + grace.

One cancel was not enough: Python 3.11 with redis-py 8 drops a cancel that races a command's
write (redis-py's send wraps it in asyncio.wait_for), so a well-behaved job looping on
``get_async_redis()`` ran on past its limit in 8 runs of 10, and the master killed its whole
process, putting every other job of it back (the red team's rt2 finding 1).

And not a cancel again: a library may lose every one. redis-py 8 on Python 3.11 lost most
(a loop of SET/GET needed from 1 to 130 cancels 50 ms apart to end), so a job still running
``every`` after its cancel gets a JobTimeout instead, thrown into its coroutine at its next
step (``_Timed``: the step the task makes, woken by a cancel or by what it awaited), where
it lands at the innermost await as the cancel did, but as an error no ``except
CancelledError`` takes for a cancel of its own (asyncio.wait_for returns the result of what
it wrapped if that finished meanwhile, and drops the cancel). The same as a sync job's
JobTimeout in its thread.

Not at once: a job that did get the cancel runs its cleanup (a ``finally`` that awaits,
an ``async with`` closing), and a cancel every tick cut those short (the 1,000-job test lost
400 cleanups waiting for a pool connection); a quarter of the grace is its cleanup's time.

A cancel is made only while the task waits inside the job's own code (``inside``: the runner
sets it around the middleware and ``perform``), so a CancelledError never lands in the runner's
writing of the job's end; when the run ends every cancel it made is taken back
(``Task.uncancel``), so nothing of them is left for what the task does next. (A cancel made
while the task is suspended is delivered at the very await it is suspended in: the loop runs
this callback and the task's steps one at a time.)

The limit counts the time the job could run (rt2 finding 4: 4 async jobs of 1 s limits, a 3 s
block of the loop by a job without one, and all 4 were cancelled as the loop came back, the
blocker untouched; docs/operating.md promises the opposite): a callback that should run every
METER_EVERY measures how long the loop was held (``_Meter``), and a job's limit moves by what
the loop was held since it started, less the holds that were its own steps (``_Timed`` times
them). A job that holds the loop itself is not excused; one that only waited is. (The master
kills at limit + grace from its record, unmoved: a loop held that long is stuck, and then only
the job holding it is charged: children.py.) The excuse is at most half the grace
(``excuse``): the master's deadline does not move with it, and a job excused past it was
killed by the master with its whole process, charged for a hold it never made (a job without
a limit holding the loop in short pieces, none long enough for the master to blame it), and a
job whose own child task held the loop (``gather``: its steps are not the job's coroutine's)
was excused without end (red team rt5, findings 1 and 2). Past the excuse it is cancelled as
before the excuse existed: a JobTimeout, not a killed process.

All of it runs on the event loop's thread. Does not own the loop (pool.py), nor the job's run
(runner.py), nor how a stuck loop is seen (watchdog.py).
"""
from __future__ import annotations

import asyncio
import time
import weakref

from ..errors import JobTimeout

#: A job past its limit is cancelled again at most this often (seconds): the watchdog's probe
#: period.
RECANCEL_MIN = 0.1


#: The loop meter's period while limits run, and the lateness past which the loop counts as
#: held (seconds).
METER_EVERY = 0.05
HELD_AFTER = 0.02


class _Meter:
    """Seconds an event loop has been held, in all (one per loop, ticking while a limit runs)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.held = 0.0
        self.users = 0
        self.expected = 0.0
        self.handle: asyncio.TimerHandle | None = None

    def acquire(self) -> None:
        self.users += 1
        if self.handle is None:
            self._schedule()

    def release(self) -> None:
        self.users -= 1
        if self.users <= 0 and self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def total(self) -> float:
        """Held so far, a hold that just ended and is not ticked yet included."""
        late = self.loop.time() - self.expected if self.handle is not None else 0.0
        return self.held + (late if late > HELD_AFTER else 0.0)

    def _schedule(self) -> None:
        self.expected = self.loop.time() + METER_EVERY
        self.handle = self.loop.call_at(self.expected, self._tick)

    def _tick(self) -> None:
        late = self.loop.time() - self.expected
        if late > HELD_AFTER:
            self.held += late
        self.handle = None
        if self.users > 0:
            self._schedule()


_meters: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Meter]" = \
    weakref.WeakKeyDictionary()


def _meter(loop: asyncio.AbstractEventLoop) -> _Meter:
    found = _meters.get(loop)
    if found is None:
        found = _meters[loop] = _Meter(loop)
    return found


class _Timed:
    """Awaits a coroutine, adding up its steps that held the loop (its own blocking)."""

    def __init__(self, coro, limit: "AsyncLimit"):
        self.coro = coro
        self.limit = limit

    def __await__(self):
        return self

    @property
    def cr_await(self):
        """(What it awaits, as a coroutine says: a stack dump walks on through it: pool.py.)"""
        return self.coro

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def send(self, value):
        if self.limit.force:
            return self._forced()
        return self._step(self.coro.send, value)

    def throw(self, *exc):
        if self.limit.force:  # (the cancel that woke it: a JobTimeout instead)
            return self._forced()
        return self._step(self.coro.throw, *exc)

    def _forced(self):
        self.limit.force = False
        return self._step(self.coro.throw, self.limit.error())

    def close(self):
        return self.coro.close()

    def _step(self, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            took = time.perf_counter() - t0
            if took > HELD_AFTER:
                self.limit.own += took


def recancel_every(grace: float) -> float:
    """Seconds between the cancels of a job past its limit, for ``timeout_grace``."""
    return max(RECANCEL_MIN, grace / 4)


class AsyncLimit:
    """The time limit of the async job running in the current task (``seconds`` > 0)."""

    def __init__(self, seconds: float, every: float = RECANCEL_MIN, description: str = "job",
                 excuse: float = float("inf")):
        self.seconds = seconds
        self.excuse = excuse      # the most its limit moves for the loop held by others
        self.description = description
        self.force = False        # its next step gets a JobTimeout (see the header)
        self.every = every        # seconds between two cancels (recancel_every)
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.expired = False
        self.cancels = 0
        self.inside = False       # the task waits inside the job's own code
        self.started = self.loop.time()
        self.meter = _meter(self.loop)
        self.meter.acquire()
        self.held_at = self.meter.total()
        self.own = 0.0            # seconds its own steps held the loop (_Timed)
        self.handle: asyncio.TimerHandle | None = self.loop.call_later(seconds, self._due)

    def timed(self, coro) -> _Timed:
        """``await limit.timed(job's coroutine)``: its own holds of the loop are not excused."""
        return _Timed(coro, self)

    def waited(self) -> float:
        """Seconds the job could not run: the loop held by others since it started."""
        return min(self.excuse, max(0.0, self.meter.total() - self.held_at - self.own))

    def _due(self) -> None:
        self.handle = None
        if self.task.done():
            return
        if not self.expired:
            left = self.started + self.seconds + self.waited() - self.loop.time()
            if left > 0.001:
                self.handle = self.loop.call_later(left, self._due)
                return
        if self.inside:
            # (the first: a cancel; the next ones: a JobTimeout at its next step, _Timed)
            self.force = self.expired
            self.cancels += 1
            self.task.cancel()
        self.expired = True
        self.handle = self.loop.call_later(self.every, self._due)

    def error(self) -> BaseException:
        return JobTimeout(f"{self.description} exceeded its {self.seconds:g}s timeout and was "
                          f"cancelled")

    def close(self) -> None:
        """The job's code is done (or cancelled for good): no more cancels, and none left."""
        self.inside = False
        if self.meter is not None:
            self.meter.release()
            self.meter = None
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if hasattr(self.task, "uncancel"):  # (3.11: a cancelled task counts its cancels)
            for _ in range(self.cancels):
                self.task.uncancel()
        self.cancels = 0
