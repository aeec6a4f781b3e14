"""Job classes for issue 21's daemon tests (unique jobs, limiters, expiring jobs): each records
what it did in Redis under ``t:`` keys, as tests/jobs.py's do."""
import json
import os
import signal
import time

import queued

RUNS = "t:runs"        # hash jid -> runs started
DONE = "t:done"        # hash jid -> runs finished
INSIDE = "t:inside"    # how many jobs hold a unit of the limiter now
LEVELS = "t:levels"    # list: INSIDE as each job entered (its peak is the most ever inside)
EVENTS = "t:events"    # list of "enter <jid>" / "exit <jid>", in Redis's order
EXPIRED = "t:expired"  # list of the payloads on_expired was called with
MSGS = "t:msgs"        # list of the payloads jobs saw, in run order
GATE = "t:gate:"       # a job waiting on a gate runs until t:gate:<tag> exists

#: The limiters every process shares (each process makes its own definition; the count is
#: in Redis).
THREE = queued.Limiter.concurrent("three", 3, wait_timeout=30, lock_timeout=30)
PER_SECOND = queued.Limiter.bucket("per-second", 2, "second", wait_timeout=0, reschedule=3)
NEVER = queued.Limiter.concurrent("never", 1, wait_timeout=0, lock_timeout=60, reschedule=2)
#: A unit its holder may keep 2 s at most (a holder killed with it gives it back then).
BRIEF = queued.Limiter.concurrent("brief", 1, wait_timeout=0, lock_timeout=2, reschedule=5)


def _r():
    return queued.get_redis()


def _start(job):
    _r().hincrby(RUNS, job.jid, 1)
    _r().rpush(MSGS, json.dumps(job.msg))


def _finish(job):
    _r().hincrby(DONE, job.jid, 1)


def _wait_gate(tag, seconds=60):
    end = time.monotonic() + seconds
    while not _r().exists(GATE + tag):
        if time.monotonic() > end:
            raise RuntimeError(f"gate {tag!r} was never opened")
        time.sleep(0.01)


class Unique(queued.Job):
    """Unique for a minute; waits on a gate when given one (so a copy is pending or running
    for exactly as long as a test needs)."""
    queued_options = {"unique_for": 60, "retry": 1}

    def perform(self, tag, gate=None):
        _start(self)
        if gate:
            _wait_gate(gate)
        _finish(self)


class UniqueUntilStart(queued.Job):
    queued_options = {"unique_for": 60, "unique_until": "start"}

    def perform(self, tag, gate=None):
        _start(self)
        if gate:
            _wait_gate(gate)
        _finish(self)


class UniqueCrash(queued.Job):
    """Unique for a minute; kills its own worker on its first ``times`` runs, then succeeds
    (or, with times >= the daemon's max_crashes, ends in dead as a poison pill)."""
    queued_options = {"unique_for": 60, "retry": 0}

    def perform(self, tag, times=1, gate=None):
        _start(self)
        if _r().hincrby("t:crashes", self.jid, 1) <= times:
            os.kill(os.getpid(), signal.SIGKILL)
        if gate:
            _wait_gate(gate)
        _finish(self)


class UniqueFails(queued.Job):
    """Unique; fails every time: its retries wait in retry (holding the lock), then it dies."""
    queued_options = {"unique_for": 60, "retry": 1}

    @classmethod
    def retry_in(cls, count, exc):
        return 1

    def perform(self, tag):
        _start(self)
        raise RuntimeError("unique and failing")


class InsideThree(queued.Job):
    """Holds a unit of THREE for ``seconds``, recording entry and exit in Redis."""

    def perform(self, seconds):
        with THREE:
            r = _r()
            pipe = r.pipeline(transaction=True)
            pipe.incr(INSIDE)
            pipe.rpush(EVENTS, f"enter {self.jid}")
            level = pipe.execute()[0]
            r.rpush(LEVELS, level)
            time.sleep(seconds)
            pipe = r.pipeline(transaction=True)
            pipe.decr(INSIDE)
            pipe.rpush(EVENTS, f"exit {self.jid}")
            pipe.execute()
        _finish(self)


class PerSecond(queued.Job):
    """One unit of a bucket of 2 per second, no waiting: a third in the same second is over
    its limit (OverLimit out of perform: rescheduled)."""

    def perform(self, tag):
        _start(self)
        with PER_SECOND:
            _r().rpush("t:granted", f"{tag} {time.time()!r}")
        _finish(self)


class HoldsNever(queued.Job):
    """Holds the one unit of NEVER until its gate opens."""

    def perform(self, gate):
        with NEVER:
            _start(self)
            _wait_gate(gate)
        _finish(self)


class WantsNever(queued.Job):
    """Wants NEVER's unit without waiting: OverLimit while HoldsNever has it."""
    queued_options = {"retry": 0}

    def perform(self, tag):
        _start(self)
        with NEVER:
            _r().rpush("t:granted", tag)
        _finish(self)


class WantsBrief(queued.Job):
    """Wants BRIEF's unit without waiting: OverLimit while someone holds it."""
    queued_options = {"retry": 0}

    def perform(self, tag):
        _start(self)
        with BRIEF:
            _r().rpush("t:granted", tag)
        _finish(self)


class Expiring(queued.Job):
    """Expires 2 s after its push (its run time, when scheduled)."""
    queued_options = {"expires_in": 2, "retry": 3}

    @classmethod
    def on_expired(cls, msg):
        _r().rpush(EXPIRED, json.dumps(msg))

    @classmethod
    def retry_in(cls, count, exc):
        return 5

    def perform(self, fail=False):
        _start(self)
        if fail:
            raise RuntimeError("fails, to be retried after its deadline")
        _finish(self)


class InsideThreeAsync(queued.Job):
    """InsideThree as an ``async def`` job: ``async with THREE``."""

    async def perform(self, seconds):
        import asyncio
        async with THREE:
            r = queued.get_async_redis()
            async with r.pipeline(transaction=True) as pipe:
                pipe.incr(INSIDE)
                pipe.rpush(EVENTS, f"enter {self.jid}")
                level = (await pipe.execute())[0]
            await r.rpush(LEVELS, level)
            await asyncio.sleep(seconds)
            async with r.pipeline(transaction=True) as pipe:
                pipe.decr(INSIDE)
                pipe.rpush(EVENTS, f"exit {self.jid}")
                await pipe.execute()
        await queued.get_async_redis().hincrby(DONE, self.jid, 1)
