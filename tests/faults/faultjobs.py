"""Job classes the fault suite runs inside real daemons.

Every run records itself in Redis so a test can count, per jid, how many runs started and how
many finished. The records survive the faults under test: each write is idempotent (SADD of
``jid:token``, a token per run) and is retried through a Redis outage, a restart or a freeze,
so a lost reply or a retried write never miscounts.
"""
import ctypes
import os
import signal
import time

import redis

import queued

STARTS = "f:starts"    # set of "jid:token", one per run that started
ENDS = "f:ends"        # set of "jid:token", one per run that finished
DONE = "f:done"        # set of jids that finished at least once (cheap to poll: SCARD)
SIZES = "f:sizes"      # hash jid -> len of Blob's data
HELD = "f:held"        # set of HoldOnce jids whose first run has started
#: Redis refusing writes for a while (no replica to write to; MISCONF: it cannot persist).
REFUSED = ("NOREPLICAS", "MISCONF")


def _write(fn):
    deadline = time.monotonic() + 120
    while True:
        try:
            return fn(queued.get_redis())
        except (redis.ConnectionError, redis.TimeoutError,  # BusyLoadingError is one too
                redis.ResponseError) as e:
            if isinstance(e, redis.ResponseError) and not any(x in str(e) for x in REFUSED):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _start(job) -> str:
    token = f"{job.jid}:{os.urandom(4).hex()}"
    _write(lambda r: r.sadd(STARTS, token))
    return token


def _end(job, token) -> None:
    def record(r):
        pipe = r.pipeline(transaction=True)
        pipe.sadd(ENDS, token)
        pipe.sadd(DONE, job.jid)
        pipe.execute()
    _write(record)


class Tick(queued.Job):
    """The ordinary job the faults happen around: optionally sleeps a few milliseconds."""

    def perform(self, i=None, sleep_ms=0):
        token = _start(self)
        if sleep_ms:
            time.sleep(sleep_ms / 1000)
        _end(self, token)


class Blob(queued.Job):
    """Takes one big argument and records its size."""

    def perform(self, data):
        token = _start(self)
        _write(lambda r: r.hset(SIZES, self.jid, len(data)))
        _end(self, token)


class Segfault(queued.Job):
    def perform(self):
        _start(self)
        ctypes.string_at(0)  # reads address 0: SIGSEGV


class HardExit(queued.Job):
    def perform(self):
        _start(self)
        os._exit(9)


class BlocksAlarm(queued.Job):
    """Ignores its time limit the way C code does: SIGALRM blocked."""
    queued_options = {"timeout": 0.5, "retry": 0}

    def perform(self, seconds=60):
        _start(self)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(seconds)


class IgnoresTimeout(queued.Job):
    """Ignores its time limit the way careless code does: catches the exception, goes on."""
    queued_options = {"timeout": 0.5, "retry": 0}

    def perform(self, seconds=60):
        _start(self)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                time.sleep(0.05)
            except queued.JobTimeout:
                pass


class Hog(queued.Job):
    """Allocates without end. Under a memory limit (RLIMIT_AS, faults/memlimit.py) Python
    raises MemoryError: the normal failure path."""
    queued_options = {"retry": 0}

    def perform(self):
        _start(self)
        chunks = []
        while True:
            chunks.append(bytearray(16 << 20))  # zero-filled: really resident


class Brim(queued.Job):
    """Fills its memory limit (RLIMIT_AS, faults/memlimit.py) to its last few KiB, then
    MemoryError: its worker's failure path has no room left unless the hog's memory, held by
    the job's frame, is given back first (a second MemoryError there killed the worker)."""
    queued_options = {"retry": 0}

    def perform(self):
        _start(self)
        chunks = []
        size = 16 << 20
        while size >= 1024:
            try:
                chunks.append(bytearray(size))
            except MemoryError:
                size //= 4
        raise MemoryError(f"no room left ({len(chunks)} chunks)")


class OomKilled(queued.Job):
    """Allocates without end until the kernel's OOM killer would step in under a cgroup limit
    of ``limit_mb``: then SIGKILL, as the OOM killer sends (no exception, no cleanup)."""

    def perform(self, limit_mb=200):
        _start(self)
        chunks = []
        page = os.sysconf("SC_PAGE_SIZE")
        while True:
            chunks.append(bytearray(16 << 20))
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * page
            if rss > limit_mb << 20:
                os.kill(os.getpid(), signal.SIGKILL)


class HoldOnce(queued.Job):
    """Sleeps ``seconds`` on the first run of its jid only, so a job that a fault makes run
    again finishes at once the second time."""

    def perform(self, seconds, tag=None):
        token = _start(self)
        if _write(lambda r: r.sadd(HELD, self.jid)) == 1:  # the first run of this jid
            time.sleep(seconds)
        _end(self, token)


FAILS_LATER = 3600  # seconds: a SlowFail's retry stays in ``retry`` for the whole test


class SlowFail(queued.Job):
    """Runs ``seconds``, then raises; its retry is an hour away, so one failure is one entry
    in ``retry`` (or ``dead`` with retry: 0) that a test can count."""
    queued_options = {"retry": 3}

    @classmethod
    def retry_in(cls, count, exc):
        return FAILS_LATER

    def perform(self, seconds, tag=None):
        _start(self)
        time.sleep(seconds)
        raise RuntimeError(f"slow failure {tag}")


class Fails(queued.Job):
    """Raises at once: its retry follows Sidekiq's formula from the payload's retry_count."""

    def perform(self, tag=None):
        _start(self)
        raise RuntimeError(f"fails {tag}")


#: A limiter no job ever holds a unit of; OverLimited raises its OverLimit all the same.
ODD = queued.Limiter.concurrent("odd", 1, wait_timeout=0, reschedule=2)


class OverLimited(queued.Job):
    """Over its limiter's limit on every run: rescheduled ``reschedule`` times, then dead."""
    queued_options = {"retry": 0}

    def perform(self, tag=None):
        _start(self)
        raise queued.OverLimit(ODD)
