"""SAQ's waiting jobs for scripts/bench_wait.py: ``saq saq_wait.settings --workers P`` with
BENCH_SAQ_CONCURRENCY async jobs at once per process. SAQ is async only: its jobs await
(asyncio.sleep), its producer is redis.asyncio (wrapped in asyncio.run for drive.py). It needs
redis < 8, so it has a virtualenv of its own (build/bench-saq-venv)."""
import asyncio
import os
import time

from saq import Queue

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
WAIT = float(os.environ.get("BENCH_WAIT", "0.02"))
queue = Queue.from_url(URL, name="bench")


async def wait(ctx, *, total):
    await asyncio.sleep(WAIT)
    r = queue.redis
    n = await r.incr("bench:done")
    if n == 1 or n == total or n == total // 10:
        await r.set("bench:first" if n == 1 else "bench:last" if n == total else "bench:warm",
                    repr(time.time()))


settings = {"queue": queue, "functions": [wait],
            "concurrency": int(os.environ.get("BENCH_SAQ_CONCURRENCY", "25"))}

BULK_API = "Queue.enqueue() x n, 1,000 at once (asyncio.gather)"


def one(total):
    asyncio.run(_enqueue(1, total))


def bulk(n, total):
    asyncio.run(_enqueue(n, total))


async def _enqueue(n, total):
    q = Queue.from_url(URL, name="bench")
    await q.connect()
    try:
        await asyncio.gather(*(q.enqueue("wait", total=total, timeout=0) for _ in range(n)))
    finally:
        await q.disconnect()
