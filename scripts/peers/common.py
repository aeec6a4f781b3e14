"""What every Python peer's jobs do, so the work per job is the same everywhere (and the same as
scripts/bench_jobs.py does for queued): one INCR, plus a timestamp from the first and the last.

The job modules import this in the worker and in the producer (scripts/peers/drive.py); the URL
comes from BENCH_REDIS_URL, set by scripts/bench_peers.py.
"""
import os
import time

import redis

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
# The jobs' own connection (redis-py's pool starts afresh in a forked child).
R = redis.Redis.from_url(URL)


def bench(total):
    """The no-op job: one INCR; the first job, the last and the one that ends the warm-up (a
    tenth of the jobs) stamp their finish time."""
    n = R.incr("bench:done")
    if n == 1 or n == total or n == total // 10:
        R.set("bench:first" if n == 1 else "bench:last" if n == total else "bench:warm",
              repr(time.time()))


def lat(t0):
    """Records how long after ``t0`` (the enqueue time, or the due time) it started."""
    R.rpush("bench:lat", repr(time.time() - t0))


#: Seconds a waiting job waits (scripts/bench_wait.py sets BENCH_WAIT): as on an HTTP call.
WAIT = float(os.environ.get("BENCH_WAIT", "0.02"))


def wait_bench(total):
    """The waiting job: BENCH_WAIT seconds of time.sleep (no CPU, as a blocking I/O call),
    then what bench does."""
    time.sleep(WAIT)
    bench(total)
