"""Job classes for workers of many jobs at once (threads and async jobs), run inside real
daemons by tests/integration/test_threads*.py. Like jobs.py, each records what it did under
``t:`` keys (jobs.RUNS, jobs.DONE), so a test counts runs by jid."""
import asyncio
import logging
import os
import threading
import time

import queued
from jobs import DONE, GATE, RUNS, _r, _start, _finish  # noqa: F401

SEEN = "t:seen"          # hash jid -> "<thread name>|<jid the job's context says>"
SPIN = "t:spin"          # list of jids whose Python loop got its JobTimeout
CLEANUP = "t:cleanup"    # list of jids whose async job ran its cleanup after cancellation
STARTS = "t:starts"      # list of "<jid> <monotonic start>" (async jobs)
LOOPS = "t:loops"        # hash jid -> "<pid>|<thread name>|<id of the running loop>" (AsyncNap)
CANCELS = "t:cancels"    # hash jid -> cancels its task had pending as it ended (AsyncGateWait)
log = logging.getLogger("app.threaded")


class Held(queued.Job):
    """Holds its thread until the gate ``tag`` opens, saying which thread it is on and what
    the job context of that thread says (each thread's own, never another job's)."""
    queued_options = {"retry": 0}

    def perform(self, tag, seconds=60):
        _start(self)
        log.info("held %s", self.jid)
        end = time.monotonic() + seconds
        while not _r().exists(GATE + tag):
            if time.monotonic() > end:
                raise RuntimeError(f"gate {tag!r} was never opened")
            time.sleep(0.01)
        queued.say(f"released {self.jid}")
        _r().hset(SEEN, self.jid, threading.current_thread().name)
        _finish(self)


class Spin(queued.Job):
    """A pure-Python loop that never ends by itself: only its JobTimeout stops it."""
    queued_options = {"timeout": 0.5, "retry": 1}

    def perform(self):
        _start(self)
        try:
            n = 0
            while True:
                n += 1
        except queued.JobTimeout:
            _r().rpush(SPIN, self.jid)
            raise


class Blocks(queued.Job):
    """Blocks in C (time.sleep) far past its time limit: the async exception cannot land."""
    queued_options = {"timeout": 0.3, "retry": 2}

    def perform(self, seconds=60):
        _start(self)
        time.sleep(seconds)
        _finish(self)


class NotThreadSafe(queued.Job):
    """Opted out of threads: runs alone, in its worker's main thread."""
    queued_options = {"threads": False}

    def perform(self, seconds=0.2):
        _start(self)
        r = _r()
        before = int(r.get("t:running") or 0)  # others running in this process now
        time.sleep(seconds)
        after = int(r.get("t:running") or 0)  # and at its end (none started meanwhile)
        r.hset(SEEN, self.jid, f"{threading.current_thread().name}|{before}|{after}")
        _finish(self)


class Counted(queued.Job):
    """Counts the jobs running at once (t:running, t:most)."""

    def perform(self, seconds=0.3):
        _start(self)
        r = _r()
        now = r.incr("t:running")
        r.eval("if tonumber(redis.call('GET', KEYS[1]) or 0) < tonumber(ARGV[1]) then "
               "redis.call('SET', KEYS[1], ARGV[1]) end", 1, "t:most", now)
        try:
            time.sleep(seconds)
        finally:
            r.decr("t:running")
        _finish(self)


class Nap(queued.Job):
    """Sleeps ``seconds`` (a job that waits, as on I/O)."""

    def perform(self, seconds):
        _start(self)
        time.sleep(seconds)
        _finish(self)


class AsyncNap(queued.Job):
    """An async job: awaits ``seconds`` (as on I/O), on its worker's event loop."""

    async def perform(self, seconds, tag=None):
        r = queued.get_async_redis()
        await r.hincrby(RUNS, self.jid, 1)
        await r.rpush(STARTS, f"{self.jid} {time.monotonic()!r}")
        await r.hset(LOOPS, self.jid, f"{os.getpid()}|{threading.current_thread().name}|"
                                      f"{id(asyncio.get_running_loop())}")
        await asyncio.sleep(seconds)
        await r.hincrby(DONE, self.jid, 1)


class AsyncStuck(queued.Job):
    """An async job past its limit: cancelled, it runs its cleanup and lets the cancellation
    through."""
    queued_options = {"timeout": 0.5, "retry": 0}

    async def perform(self, seconds=60):
        r = queued.get_async_redis()
        await r.hincrby(RUNS, self.jid, 1)
        await r.rpush(STARTS, f"{self.jid} {time.monotonic()!r}")
        try:
            await asyncio.sleep(seconds)
        finally:
            await r.rpush(CLEANUP, self.jid)


class AsyncDropsACancel(queued.Job):
    """An async job that loses the first cancellation of its limit, as a redis-py command does
    when the cancel races its write (rt2 finding 1), then awaits on: only a second cancel
    ends it."""
    queued_options = {"timeout": 0.5, "retry": 0}

    async def perform(self, seconds=60):
        r = queued.get_async_redis()
        await r.hincrby(RUNS, self.jid, 1)
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            await r.rpush(CLEANUP, f"{self.jid} dropped")
        await asyncio.sleep(seconds)


class AsyncIgnoresCancel(queued.Job):
    """An async job that swallows every cancellation and JobTimeout and awaits on (careless
    code)."""
    queued_options = {"timeout": 0.5, "retry": 0}

    async def perform(self, seconds=60):
        _start(self)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                await asyncio.sleep(0.05)  # (awaits here)
            except (asyncio.CancelledError, queued.JobTimeout):
                pass


class AsyncHoldsLoop(queued.Job):
    """An async job without a time limit that blocks its event loop until the gate ``tag``
    opens (sync calls in async def): the async jobs handed to the loop meanwhile wait."""

    async def perform(self, tag):
        _start(self)
        while not _r().exists(GATE + tag):
            time.sleep(0.01)
        _finish(self)


class AsyncGateWait(queued.Job):
    """An async job that awaits (polling) until the gate ``tag`` opens: it runs little itself."""
    queued_options = {"timeout": 2, "retry": 3}

    async def perform(self, tag):
        r = queued.get_async_redis()
        await r.hincrby(RUNS, self.jid, 1)
        while not await r.exists(GATE + tag):
            await asyncio.sleep(0.01)
        # (a cancel a library lost is still pending: Task.cancelling, Python 3.11+)
        task = asyncio.current_task()
        await r.hset(CANCELS, self.jid, getattr(task, "cancelling", lambda: 0)())
        await r.hincrby(DONE, self.jid, 1)


class AsyncBlocksThenOpens(queued.Job):
    """An async job without a time limit that blocks its event loop ``seconds`` (time.sleep
    in async def), then opens the gate ``tag``."""

    async def perform(self, seconds, tag):
        _start(self)
        time.sleep(seconds)
        _r().set(GATE + tag, 1)
        _finish(self)


class AsyncBlocksLoop(queued.Job):
    """An async job that blocks its event loop (time.sleep in async def): every other async
    job of the process waits on it."""
    queued_options = {"timeout": 0.5, "retry": 1}

    async def perform(self, seconds=60):
        _start(self)
        time.sleep(seconds)


@queued.job(retry=0)
async def async_function(key, value):
    await queued.get_async_redis().rpush(key, value)


class AsyncCounted(queued.Job):
    """Counted's async twin (the same t:running and t:most)."""

    async def perform(self, seconds=0.3):
        r = queued.get_async_redis()
        await r.hincrby(RUNS, self.jid, 1)
        now = await r.incr("t:running")
        await r.eval("if tonumber(redis.call('GET', KEYS[1]) or 0) < tonumber(ARGV[1]) then "
                     "redis.call('SET', KEYS[1], ARGV[1]) end", 1, "t:most", now)
        try:
            await asyncio.sleep(seconds)
        finally:
            await r.decr("t:running")
        await r.hincrby(DONE, self.jid, 1)


WHERE = "t:where"        # hash jid -> "<pid> <thread name>"


class Where(queued.Job):
    """Records which process and thread ran it."""

    def perform(self, tag=None):
        _start(self)
        _r().hset(WHERE, self.jid, f"{os.getpid()} {threading.current_thread().name}")
        _finish(self)


@queued.on("thread_start")
def _thread_started():
    """Each thread that runs jobs says so once, before its first job."""
    _r().rpush("t:thread_start", f"{os.getpid()} {threading.current_thread().name}")


class AsyncReleases(queued.Job):
    """jobs.Releases's async twin: releases itself on its first ``times`` runs."""
    queued_options = {"retry": 3}

    async def perform(self, delay=0, times=1):
        r = queued.get_async_redis()
        if await r.hincrby(RUNS, self.jid, 1) <= times:
            self.release(delay)
        await r.hincrby(DONE, self.jid, 1)


class AsyncBuries(queued.Job):
    """jobs.Buries's async twin: buries itself; an ``except Exception`` cannot catch it."""

    async def perform(self, reason="not today"):
        r = queued.get_async_redis()
        await r.hincrby(RUNS, self.jid, 1)
        try:
            self.bury(reason)
        except Exception:  # noqa: BLE001 - bury must not be caught by this
            await r.rpush("t:caught", self.jid)
        await r.hincrby(DONE, self.jid, 1)


class AsyncTouches(queued.Job):
    """jobs.Touches's async twin: awaits ``seconds``, touching its lease every ``every``
    seconds (into t:touched:async)."""

    async def perform(self, seconds, every):
        r = queued.get_async_redis()
        await r.hincrby(RUNS, self.jid, 1)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await asyncio.sleep(min(every, max(0.0, end - time.monotonic())))
            await r.rpush("t:touched:async", "1" if self.touch() else "0")
        await r.hincrby(DONE, self.jid, 1)


class AsyncCancelsItself(queued.Job):
    """Fails with a cancel left pending on its own task (a library that cancels the current
    task and swallows it once): its end must still be written, counted and its lane freed."""
    queued_options = {"retry": 0}

    async def perform(self):
        _start(self)
        asyncio.current_task().cancel()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            pass
        asyncio.current_task().cancel()
        raise ValueError("failed with a cancel pending")


class AsyncHookCancelsItself(queued.Job):
    """Fails, and its async after_failed hook is cancelled inside (a library that cancels the
    current task): a hook's cancel is logged like its error, and the job still ends counted
    with its lane freed."""
    queued_options = {"retry": 0}

    async def perform(self):
        _start(self)
        raise ValueError("failed, then its hook is cancelled")

    async def after_failed(self, exc):
        asyncio.current_task().cancel()
        await asyncio.sleep(0)
