#!/usr/bin/env python3
"""The worker's CPU per no-op job, one tree of queued against another, in turns: how much a
change to the per-job path costs a job that uses none of it (issue 21's guards must cost such a
job nothing). Run by hand on a quiet machine::

    git archive main | tar -x -C /tmp/queued-main     # the tree to compare with
    python3 scripts/bench_job_cost.py --other /tmp/queued-main [--jobs 20000] [--runs 5]

Each run starts one daemon (one worker process) from a tree, pushes ``--jobs`` no-op jobs (one
INCR each) while it idles, and reads the worker's CPU time (user + system, psutil) from the
first job's start to the last one's end; the figure is CPU microseconds per job. The trees take
turns, so drift on the machine falls on both; medians are printed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import psutil
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from benchlib import RedisServer  # noqa: E402

JOBS = '''
import queued

class Noop(queued.Job):
    def perform(self, i):
        queued.get_redis().incr("bench:done")
'''


def one_run(tree: str, url: str, jobs: int, workdir: str) -> float:
    r = redis.Redis.from_url(url)
    r.flushall()
    with open(os.path.join(workdir, "benchjobs.py"), "w") as f:
        f.write(JOBS)
    config = os.path.join(workdir, "bench.yml")
    with open(config, "w") as f:
        json.dump({"redis_url": url, "concurrency": 1, "require": ["benchjobs.py"],
                   "job_logging": False}, f)
    env = {**os.environ, "PYTHONPATH": tree}
    env.pop("REDIS_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "queued", "-C", config], cwd=workdir,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while not (children := psutil.Process(proc.pid).children()) or not r.scard("processes"):
            if time.time() > deadline:
                raise SystemExit(f"the daemon of {tree} did not start")
            time.sleep(0.05)
        worker = children[0]
        time.sleep(0.5)  # idle and blocked in Redis
        payloads = [json.dumps({"class": "Noop", "args": [i], "queue": "default",
                                "jid": f"{i:024x}", "retry": True, "created_at": time.time(),
                                "enqueued_at": time.time()}) for i in range(jobs)]
        before = worker.cpu_times()
        for start in range(0, jobs, 1000):
            r.lpush("queue:default", *payloads[start:start + 1000])
        r.sadd("queues", "default")
        while int(r.get("bench:done") or 0) < jobs:
            time.sleep(0.01)
        after = worker.cpu_times()
        used = (after.user - before.user) + (after.system - before.system)
        return used / jobs * 1e6
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", required=True, help="the tree to compare this one with")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or
                        "/usr/bin/redis-server")
    args = parser.parse_args()
    server = RedisServer(args.redis_server)
    trees = {"this": ROOT, "other": os.path.abspath(args.other)}
    results: dict[str, list[float]] = {name: [] for name in trees}
    workdir = tempfile.mkdtemp(prefix="queued-jobcost-")
    try:
        for run in range(args.runs):
            for name, tree in (trees.items() if run % 2 == 0 else reversed(trees.items())):
                results[name].append(one_run(tree, server.url, args.jobs, workdir))
                print(f"run {run + 1} {name}: {results[name][-1]:.1f} us CPU per job",
                      flush=True)
        for name in trees:
            print(f"{name} ({trees[name]}): median {statistics.median(results[name]):.1f} us "
                  f"CPU per job over {args.runs} runs")
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
