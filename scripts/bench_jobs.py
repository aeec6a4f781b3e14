"""Jobs for scripts/bench. The throughput job costs the job itself exactly one Redis command,
like the Sidekiq anchor in SIDEKIQ_FORMAT.md section 9 (``INCR bench:done``)."""
import json
import os
import time

import queued


class BenchJob(queued.Job):
    """No-op job: one INCR. The first job, the last and the one that ends the warm-up (a tenth
    of the jobs; benchlib.rates) stamp their finish time."""

    def perform(self, total):
        r = queued.get_redis()
        n = r.incr("bench:done")
        if n == 1 or n == total or n == total // 10:
            r.set("bench:first" if n == 1 else "bench:last" if n == total else "bench:warm",
                  repr(time.time()))


class CpuJob(queued.Job):
    """Burns ``ms`` milliseconds of its own CPU (thread time), then records its finish: with
    ``stamps`` (a directory: benchlib.Stamps), its time appended to a file of its process's
    there, a write of 18 bytes; without, BenchJob's INCR (scripts/bench_instr.py counts
    bench:done). The CPU-bound workload (scripts/bench --quick). Why not the INCR there: on
    this VM a command every millisecond from each of two processes costs the cores ~15 % of
    a 1 ms job (each send wakes a halted Redis), so two plain processes doing burn-and-INCR
    reach only ~0.83 of the cores' limit, where burn-and-write reaches ~0.97
    (scripts/bench_cpu_floor.py): the INCR measured the instrument, not the daemon."""

    def perform(self, total, ms=1.0, stamps=None):
        burn(ms)
        if stamps is None:
            BenchJob.perform(self, total)
        else:
            record_finish(stamps)


def burn(ms: float) -> None:
    """``ms`` milliseconds of this thread's CPU."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


_stamp_fds: dict = {}


def record_finish(stamps: str) -> None:
    """This moment appended to this process's file in ``stamps`` (benchlib.Stamps reads it)."""
    os.write(stamp_fd(stamps), b"%.6f\n" % time.time())


def stamp_fd(stamps: str) -> int:
    """This process's stamp file in the directory ``stamps`` (opened once; O_APPEND, so the
    lines of a worker's threads never mix: each is one write)."""
    key = (os.getpid(), stamps)
    fd = _stamp_fds.get(key)
    if fd is None:
        fd = _stamp_fds[key] = os.open(os.path.join(stamps, str(os.getpid())),
                                       os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return fd


class LatencyJob(queued.Job):
    """Records how long after its push (``enqueued_at``) or its due time it started."""

    def perform(self, due=None):
        started = time.time()
        base = due if due is not None else self.msg["enqueued_at"]
        queued.get_redis().rpush("bench:lat", repr(started - base))


class StallJob(queued.Job):
    """For the requeue measurement: records each start (its token, which start it is, the time,
    its worker's pid) and, the first time, holds its worker until the bench SIGKILLs it."""

    def perform(self, token):
        started = time.time()
        r = queued.get_redis()
        n = r.incr(f"bench:starts:{token}")
        r.rpush("bench:start", json.dumps([token, n, started, os.getpid()]))
        if n == 1:
            time.sleep(60)


#: Seconds a waiting job waits (scripts/bench_wait.py sets BENCH_WAIT): as on an HTTP call.
WAIT = float(os.environ.get("BENCH_WAIT", "0.02"))


def _stamp(n: int, total: int, r) -> None:
    if n == 1 or n == total or n == total // 10:
        r.set("bench:first" if n == 1 else "bench:last" if n == total else "bench:warm",
              repr(time.time()))


class WaitJob(queued.Job):
    """Waits BENCH_WAIT seconds without CPU (time.sleep, as a blocking I/O call does), then
    does what BenchJob does."""

    def perform(self, total):
        time.sleep(WAIT)
        r = queued.get_redis()
        _stamp(r.incr("bench:done"), total, r)


class AsyncWaitJob(queued.Job):
    """The same as an async job: awaits BENCH_WAIT seconds on its worker's event loop."""

    async def perform(self, total):
        import asyncio
        await asyncio.sleep(WAIT)
        r = queued.get_async_redis()
        n = await r.incr("bench:done")
        if n == 1 or n == total or n == total // 10:
            await r.set("bench:first" if n == 1 else "bench:last" if n == total
                        else "bench:warm", repr(time.time()))
