"""Recycling with real workers: one whose RSS passes max_memory_mb after a job that keeps 50 MB
per run leaves after that job and a fresh one takes its slot; max_jobs (+ jitter) retires a
worker after exactly its share; the other worker keeps working, nothing is lost or run twice,
and the heartbeat's RSS is the live processes'."""
from __future__ import annotations

import json
import re
import time
from collections import Counter, defaultdict

import psutil

from harness import pid_alive, wait_for

RAN = "t:recycle:ran"
LIMIT_MB = 200


def ran(r) -> list[dict]:
    return [json.loads(x) for x in r.lrange(RAN, 0, -1)]


def push(producer, klass, n) -> list[str]:
    return [producer.push({"class": klass, "args": [i]}) for i in range(n)]


def test_a_worker_over_max_memory_mb_finishes_its_job_and_is_replaced(daemon, producer, r):
    # Given two workers allowed 200 MiB each, and jobs that each keep 50 MB of their worker's
    # memory, among ordinary ones
    d = daemon(require=("recyclejobs.py",), concurrency=2, max_memory_mb=LIMIT_MB)
    hogs = push(producer, "Hog", 12)
    others = push(producer, "WhoRan", 300)
    # When they have all run, and the workers are idle (a worker that ran the last job may
    # still be leaving until then: alive, though its log line says it left)
    wait_for(lambda: len(ran(r)) >= 312, 60, what="every job")
    d.wait_idle()
    runs = ran(r)
    # Then every job ran exactly once: nothing lost when a worker left, nothing run twice
    assert Counter(x["jid"] for x in runs) == Counter(hogs + others)
    # And a worker left right after the job that took it over the limit, and only then
    by_pid = defaultdict(list)
    for x in runs:
        by_pid[x["pid"]].append(x)
    left = [pid for pid in by_pid if not pid_alive(pid)]
    assert len(left) >= 2, {p: [round(x["rss_mb"]) for x in v] for p, v in by_pid.items()}
    for pid in left:
        sizes = [x["rss_mb"] for x in by_pid[pid]]
        assert sizes[-1] > LIMIT_MB and all(s <= LIMIT_MB for s in sizes[:-1]), sizes
        assert by_pid[pid][-1]["class"] == "Hog"
    for pid, xs in by_pid.items():
        if pid not in left:  # alive: never went over
            assert all(x["rss_mb"] <= LIMIT_MB for x in xs)
    # And said so, and fresh workers took their slots (the others kept working meanwhile)
    out = d.output()
    said = re.findall(r"pid=(\d+) tid=w\d .*recycling worker \d: its RSS is (\d+) MiB, over "
                      r"max_memory_mb 200, after \d+ jobs; a fresh worker takes its place", out)
    assert sorted(int(p) for p, _ in said) == sorted(left)
    assert len(d.workers_up()) == 2
    # And the heartbeat's RSS is the master's and the live workers' (not the ones that left)
    beat_after = time.time() + 0.1
    ident = d.identity()
    wait_for(lambda: float(r.hget(ident, "beat")) > beat_after, 10, what="a fresh beat")
    live = [d.pid, *d.worker_pids()]
    actual = sum(psutil.Process(p).memory_info().rss for p in live) // 1024
    reported = int(r.hget(ident, "rss"))
    assert abs(reported - actual) < max(0.1 * actual, 20 * 1024), (reported, actual)
    assert d.stop() == 0


def test_max_jobs_with_jitter_retires_each_worker_after_exactly_its_share(
        daemon, producer, r):
    # Given workers that leave after 5 + 0..3 jobs each
    d = daemon(require=("recyclejobs.py",), concurrency=2, max_jobs=5, max_jobs_jitter=3)
    jids = push(producer, "WhoRan", 80)
    wait_for(lambda: len(ran(r)) >= 80, 30, what="every job")
    d.wait_idle()  # (the worker that ran the last job may be leaving: see above)
    runs = ran(r)
    # Then each job ran once
    assert Counter(x["jid"] for x in runs) == Counter(jids)
    per_pid = Counter(x["pid"] for x in runs)
    retired = {pid: n for pid, n in per_pid.items() if not pid_alive(pid)}
    # And each retired worker ran between 5 and 8 jobs, exactly what it said when it left
    assert len(retired) >= 80 // 8 - 2, per_pid
    assert all(5 <= n <= 8 for n in retired.values()), retired
    said = {int(pid): (int(n), int(base) + int(jitter)) for pid, n, base, jitter in re.findall(
        r"pid=(\d+) tid=w\d .*recycling worker \d: ran (\d+) jobs \(max_jobs (\d+) \+ jitter "
        r"(\d+)\); a fresh worker takes its place", d.output())}
    assert {pid: n for pid, (n, _) in said.items()} == retired
    assert all(n == limit for n, limit in said.values())
    assert all(n <= 8 for n in per_pid.values())
    assert d.stop() == 0
