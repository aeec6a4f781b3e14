"""queued's daemon as the benchmarks run it on jobs pushed before it starts (scripts/bench's
parts and scripts/bench_quick.py): one measured run gives jobs/s after the warm-up, the
workers' CPU per job and Redis's CPU per job."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import redis

import queued
from benchlib import ROOT, push_bulk, rates, redis_cpu, wait_key, write_queued_config


def cpu_seconds(proc: psutil.Process) -> float:
    """The CPU time a process's threads have run, to the nanosecond: the scheduler's own
    account (/proc/<pid>/task/<tid>/schedstat), where user + system time from /proc/<pid>/stat
    come in 10 ms ticks (4 us per job at 5,000 jobs on two workers: more than a log line
    costs). psutil's figure where schedstat is missing."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            with open(f"/proc/{proc.pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return sum(proc.cpu_times()[:2])


class Daemon:
    """``python -m queued`` on a config of our own; stderr to DEVNULL, a LogSink or a CatSink."""

    def __init__(self, url, concurrency, extra, stderr=subprocess.DEVNULL):
        self.concurrency = concurrency
        self.cfg = write_queued_config(url, concurrency, extra)
        env = dict(os.environ, PYTHONPATH=ROOT)
        self.proc = subprocess.Popen([sys.executable, "-m", "queued", "-C", self.cfg],
                                     stdout=subprocess.DEVNULL, stderr=stderr, env=env)

    def workers(self) -> list[psutil.Process]:
        out = []
        for p in psutil.Process(self.proc.pid).children():
            try:
                if p.status() != psutil.STATUS_ZOMBIE:  # a killed worker not yet reaped
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    def wait_workers(self, gone=()):
        """Until all its workers run (none of them a pid in ``gone``) and have had time to
        reach their first blocking fetch."""
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                pids = {p.pid for p in self.workers()}
            except psutil.NoSuchProcess:
                break
            if len(pids) >= self.concurrency and not pids & set(gone):
                time.sleep(0.3)
                return
            time.sleep(0.01)
        raise SystemExit("daemon did not start its workers")

    def pss_mib(self):
        procs = [psutil.Process(self.proc.pid)] + self.workers()
        return sum(p.memory_full_info().pss for p in procs) / 2**20

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        os.unlink(self.cfg)


def run_jobs(url, n, concurrency, extra, sink=None, task=False, job=None, stamps=None,
             more=()) -> dict:
    """``n`` jobs of ``job`` (bench_jobs.BenchJob: a no-op; each given ``n`` and ``more``)
    pushed in bulk, in one queued.Task if ``task``, then a daemon started on them. Returns
    ``rate`` (jobs/s after the warm-up, benchlib.rates), ``worker_us`` (the workers' CPU per
    job after the warm-up, from the scheduler's account: less at the mercy of the host's other
    processes than jobs/s) and ``redis_us`` (Redis's CPU per job, INFO cpu from the daemon's
    start to the last job's finish); with ``task``, ``progress``: the task's counts once the
    daemon has stopped. With ``stamps`` (a benchlib.Stamps whose directory the job is given in
    ``more``), the jobs' finishes are read from it instead of their Redis keys."""
    r = redis.Redis.from_url(url)
    r.flushall()
    made = queued.Task("bench") if task else None
    if made:
        with made:
            push_bulk(n, job, more)
    else:
        push_bulk(n, job, more)
    cpu0 = redis_cpu(r)
    d = Daemon(url, concurrency, extra, stderr=sink.child if sink else subprocess.DEVNULL)
    try:
        # the workers' CPU in steady state: from the end of the warm-up (its jobs and the
        # workers' start vary by more than a log line costs) to the last job
        if stamps is None:
            wait_key(r, "bench:warm")
            busy0, done0 = sum(cpu_seconds(p) for p in d.workers()), int(r.get("bench:done"))
            wait_key(r, "bench:last")
        else:
            stamps.wait(n // 10)
            busy0, done0 = sum(cpu_seconds(p) for p in d.workers()), stamps.count()
            stamps.wait(n)
        redis_us = (redis_cpu(r) - cpu0) / n * 1e6
        workers = sum(cpu_seconds(p) for p in d.workers()) - busy0
    finally:
        d.stop()
    rate = (rates(r, n) if stamps is None else stamps.rates(n))[0]
    out = {"rate": rate, "worker_us": workers / max(n - done0, 1) * 1e6, "redis_us": redis_us}
    if made:
        out["progress"] = made.progress()
    return out


def throughput(url, n, concurrency, extra, sink=None, task=False) -> float:
    return run_jobs(url, n, concurrency, extra, sink, task)["rate"]


def throughput_cpu(url, n, concurrency, extra) -> tuple[float, float]:
    """(jobs/s, the workers' CPU time per job in microseconds): CPU time is what recording
    adds to, and it is less at the mercy of other processes on the host than jobs/s."""
    x = run_jobs(url, n, concurrency, extra)
    return x["rate"], x["worker_us"]
