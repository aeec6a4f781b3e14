#!/usr/bin/env python3
"""What a ``with limiter:`` costs, and a concurrent limiter's exactness under load (issue 21).
Run by hand on a quiet machine (it starts its own redis-server on a free port)::

    python3 scripts/bench_limits.py [--n 20000] [--procs 4] [--threads 4] [--size 5]
                                    [--holds 1000]

1. The cost of one ``with limiter:`` of each kind (concurrent, bucket, window, leaky), a unit
   always free: round trips (script calls) per ``with``, Redis's own CPU per ``with`` (INFO's
   used_cpu_user + used_cpu_sys over the run, so what every other client of that Redis pays)
   and the caller's wall time per ``with``.
2. A concurrent limiter of SIZE across PROCS processes of THREADS threads each (more holders
   than units), each thread taking it HOLDS times and holding it a moment (an INCR on entry and
   a DECR on exit, in Redis): the most ever inside at once must be exactly SIZE, never SIZE + 1.
   Also prints how many takes waited and the mean wait.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import RedisServer  # noqa: E402

import queued  # noqa: E402
from queued.keys import Keys  # noqa: E402


def redis_cpu(r) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def calls(r) -> int:
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k in ("cmdstat_evalsha",
                                                                 "cmdstat_eval"))


def cost(url: str, n: int) -> None:
    queued.configure(url=url)
    r = redis.Redis.from_url(url)
    kinds = {
        "concurrent": queued.Limiter.concurrent("bench-c", 10 ** 6),
        "bucket": queued.Limiter.bucket("bench-b", 10 ** 9, "day"),
        "window": queued.Limiter.window("bench-w", 10 ** 9, 3600),
        "leaky": queued.Limiter.leaky("bench-l", 10 ** 9, 3600),
    }
    print(f"{'kind':<11} {'scripts/with':>12} {'Redis CPU us/with':>18} {'wall us/with':>13}")
    for name, limiter in kinds.items():
        for _ in range(200):  # warm: scripts loaded, connections made
            with limiter:
                pass
        if name == "window":
            r.delete(Keys().limiter("bench-w", "state"))
        before_cpu, before_calls = redis_cpu(r), calls(r)
        started = time.perf_counter()
        for _ in range(n):
            with limiter:
                pass
        wall = time.perf_counter() - started
        used = redis_cpu(r) - before_cpu
        scripts = (calls(r) - before_calls) / n
        print(f"{name:<11} {scripts:>12.2f} {used / n * 1e6:>18.1f} {wall / n * 1e6:>13.1f}")
    r.close()


def _holder(url: str, size: int, threads: int, holds: int, start) -> None:
    import threading
    client = queued.Client(url=url)
    limiter = queued.Limiter.concurrent("bench-exact", size, wait_timeout=60, client=client)
    r = client.redis

    def hold():
        for _ in range(holds):
            with limiter:
                level = r.incr("bench:inside")
                r.rpush("bench:levels", level)
                r.decr("bench:inside")

    start.wait()
    running = [threading.Thread(target=hold) for _ in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()


def exactness(url: str, procs: int, threads: int, size: int, holds: int) -> None:
    r = redis.Redis.from_url(url)
    r.delete("bench:inside", "bench:levels")
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    workers = [ctx.Process(target=_holder, args=(url, size, threads, holds, start))
               for _ in range(procs)]
    for w in workers:
        w.start()
    began = time.perf_counter()
    start.set()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - began
    levels = [int(x) for x in r.lrange("bench:levels", 0, -1)]
    stats = {k.decode(): v.decode() for k, v in
             r.hgetall(Keys().limiter("bench-exact")).items() if k != b"def"}
    waited = int(stats.get("waited", 0))
    mean = int(stats.get("wait_ms", 0)) / waited if waited else 0.0
    print(f"\nconcurrent limiter of {size}, {procs} processes x {threads} threads x {holds} "
          f"holds: "
          f"{len(levels)} holds in {elapsed:.2f}s ({len(levels) / elapsed:,.0f}/s)")
    print(f"  most inside at once: {max(levels)} (must be {size}, never {size + 1})")
    print(f"  granted at once {stats.get('held', 0)}, after a wait {waited} "
          f"(mean wait {mean:.2f} ms), over limit {stats.get('overlimit', 0)}")
    if max(levels) > size:
        raise SystemExit("FAILED: the limit was exceeded")
    r.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000, help="withs per kind (default 20000)")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--size", type=int, default=5)
    parser.add_argument("--threads", type=int, default=4, help="threads per process")
    parser.add_argument("--holds", type=int, default=1000, help="holds per thread")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or
                        "/usr/bin/redis-server")
    args = parser.parse_args()
    server = RedisServer(args.redis_server)
    try:
        cost(server.url, args.n)
        exactness(server.url, args.procs, args.threads, args.size, args.holds)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
