#!/usr/bin/env python3
"""What a push pays for queued.django's after-commit hook and queued.testing's hook (issue 19):
CPU time per ``perform_async`` one by one, against a redis-server of its own, in child
processes run in turns so machine noise falls on every variant alike. Run by hand; figures go
in docs/benchmarks.md.

    scripts/bench_push_hooks.py                          # this checkout, hooks off / Django on
    scripts/bench_push_hooks.py --against /work/main     # and a checkout without the hooks
    scripts/bench_push_hooks.py --pushes 20000 --runs 7

Variants: ``plain`` (no Django, hooks None: every producer that is not a Django project),
``django`` (queued.django's hook installed, no transaction open: a Django producer's push made
outside ``atomic()``, one attribute read more), and with ``--against DIR`` ``before`` (that
checkout's client, which has no hooks). CPU time (process_time) per push, so the round trip's
wait is not counted; the median of ``--runs`` runs of ``--pushes`` pushes each.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

from benchlib import RedisServer  # noqa: E402

CHILD = r"""
import json, os, sys, time
import queued
variant, url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
queued.configure(url=url)
if variant == "django":
    import django
    from django.conf import settings
    settings.configure(DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                              "NAME": ":memory:"}},
                       INSTALLED_APPS=["queued.django"])
    django.setup()  # (queued.django's ready() installs the hook)
    import queued.client
    assert queued.client.commit_hook is not None

class BenchPush(queued.Job):
    def perform(self, i):
        pass

for i in range(500):  # warm up: connections, caches
    BenchPush.perform_async(i)
start = time.process_time()
for i in range(n):
    BenchPush.perform_async(i)
print(json.dumps((time.process_time() - start) / n * 1e6))
"""


def run(tree: str, variant: str, url: str, pushes: int) -> float:
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run([sys.executable, "-c", CHILD, variant, url, str(pushes)], env=env,
                         capture_output=True, text=True, check=True, cwd="/")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pushes", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", metavar="DIR", help="a checkout without the hooks")
    args = parser.parse_args()
    variants = [(ROOT, "plain"), (ROOT, "django")]
    if args.against:
        variants.insert(0, (os.path.abspath(args.against), "before"))
    server = RedisServer(shutil.which("redis-server") or "/usr/bin/redis-server")
    try:
        results: dict[str, list[float]] = {v: [] for _, v in variants}
        for _ in range(args.runs):
            for tree, variant in variants:
                redis.Redis.from_url(server.url).flushall()
                results[variant].append(run(tree, variant, server.url, args.pushes))
    finally:
        server.stop()
    for variant, values in results.items():
        print(f"{variant:7s} CPU per push: median {statistics.median(values):.2f} us "
              f"(runs: {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
