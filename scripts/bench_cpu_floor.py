#!/usr/bin/env python3
"""What the cores can do with a 1 ms CPU-bound job and nothing around it: the floor under
scripts/bench --quick's ``cpu`` ratio. Each round runs, interleaved, as many plain processes
as there are cores (no queue, no daemon), each doing ``--jobs`` times:

    burn     burn 1 ms of its thread's CPU (bench_jobs.burn)
    incr     burn, then INCR a key on a redis-server of our own (the job's own command)
    stamp    burn, then append its finish time to a file (bench_jobs.CpuJob's ``stamps``)

and prints jobs/s (all processes, from the first start to the last exit) and its share of the
cores' limit (cores x 1,000/s), medians with every round's figure. On a VM, a command sent
every millisecond wakes a halted Redis each time; what that costs the cores is the gap between
``incr`` and ``stamp``.

    scripts/bench_cpu_floor.py [--jobs 1500] [--runs 5]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_jobs  # noqa: E402
from benchlib import RedisServer, Stamps  # noqa: E402

MODES = ("burn", "incr", "stamp")


def _loop(mode: str, n: int, url: str, stamps: str) -> None:
    r = redis.Redis.from_url(url)
    r.ping()
    for _ in range(n):
        bench_jobs.burn(1.0)
        if mode == "incr":
            r.incr("floor:done")
        elif mode == "stamp":
            bench_jobs.record_finish(stamps)


def one(mode: str, n: int, procs: int, url: str) -> float:
    """jobs/s of ``procs`` processes each running ``n`` jobs of ``mode``."""
    stamps = Stamps()
    try:
        t0 = time.perf_counter()
        kids = []
        for _ in range(procs):
            pid = os.fork()
            if pid == 0:
                try:
                    _loop(mode, n, url, stamps.dir)
                except BaseException:  # noqa: BLE001 - said, and the parent stops on it
                    import traceback
                    traceback.print_exc()
                    os._exit(1)
                os._exit(0)
            kids.append(pid)
        for pid in kids:
            if os.waitpid(pid, 0)[1] != 0:
                raise SystemExit(f"the {mode} loop failed (its traceback above)")
        took = time.perf_counter() - t0
        if mode == "stamp" and stamps.count() != n * procs:
            raise SystemExit(f"{stamps.count()} stamps for {n * procs} jobs")
        return n * procs / took
    finally:
        stamps.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1500, help="jobs per process per step")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--procs", type=int, default=os.cpu_count())
    args = ap.parse_args()
    server = RedisServer(shutil.which("redis-server") or "redis-server")
    got = {m: [] for m in MODES}
    try:
        for rnd in range(args.runs):
            order = MODES[rnd % 3:] + MODES[:rnd % 3]
            for mode in order:
                got[mode].append(one(mode, args.jobs, args.procs, server.url))
    finally:
        server.stop()
    limit = args.procs * 1000.0
    print(f"{args.procs} processes x {args.jobs:,} jobs of 1 ms, {args.runs} rounds; "
          f"the cores' limit {limit:,.0f} jobs/s")
    for mode in MODES:
        med = statistics.median(got[mode])
        runs = ", ".join(f"{x:,.0f}" for x in got[mode])
        print(f"  {mode:6} {med:7,.0f} jobs/s  {med / limit:.3f} of the limit   ({runs})")


if __name__ == "__main__":
    main()
