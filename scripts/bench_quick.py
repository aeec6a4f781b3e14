"""``scripts/bench --quick``: issue 18's guard. The ratios the issue sets as targets, each from
one interleaved run of about a minute and a half on this 2-core machine, so that the next
feature that costs a job 20 % shows it (docs/benchmarks.md, "The quick guard").

Each of ``--runs`` rounds (default 3) runs every step below once, the order rotating from
round to round, on one redis-server of our own, each from FLUSHALL with its jobs pushed in
bulk before the system starts (jobs/s after the warm-up, benchlib.rates):

    queued      queued -c 2, ``--jobs`` (5,000) no-op jobs, job_logging false
    bare        the bare at-most-once BRPOP loop in as many processes (benchlib.baseline)
    sidekiq     Sidekiq 6.4 -c 10 as the side-by-side table runs it at its best
                (bench_configs.CHOSEN["sidekiq"]); left out, and said, if Sidekiq is missing
    task        queued's run with the jobs pushed in one queued.Task (counts checked exact)
    cpu         ``--cpu-jobs`` (2,000) jobs that each burn 1 ms of their own CPU and record
                their finish in a file, not Redis (bench_jobs.CpuJob says why)
    log-text    queued's run with job_logging true (the default line)
    log-json    the same with log_format json

Every queued step's stderr is a pipe read by ``cat`` (benchlib.CatSink), so the log steps
measure queued's own cost of a line, not a reader of ours; its lines are counted to check.
Redis CPU per job is INFO cpu (used_cpu_sys + used_cpu_user) from the system's start to its
last job's finish, over the jobs. Each ratio is taken within a round (machine noise hits both
sides alike); the figure is the median of the rounds' ratios, each round's shown beside it.
"""
from __future__ import annotations

import datetime
import os
import shutil
import statistics
import subprocess
import time

import redis

import queued
from bench_daemon import run_jobs
from benchlib import ROOT, CatSink, RedisServer, Stamps, baseline

CPU_MS = 1.0  # what bench_jobs.CpuJob burns by default

#: (key, what is divided, the target, whether the figure must be at least or at most it)
RATIOS = [
    ("vs-bare", "queued -c 2 ÷ the bare BRPOP loop, jobs/s", 1.3, "min"),
    ("vs-sidekiq", "queued -c 2 ÷ Sidekiq -c 10, jobs/s", 2.0, "min"),
    ("task", "a task's job ÷ the same job outside one, jobs/s", 0.8, "min"),
    ("cpu", "1 ms CPU-bound jobs/s ÷ the cores' limit", 0.85, "min"),
    ("log-text", "log lines on (text) ÷ off, jobs/s", 0.95, "min"),
    ("log-json", "log lines on (json) ÷ off, jobs/s", 0.95, "min"),
    ("redis-cpu", "Redis CPU per job, queued -c 2 ÷ Sidekiq -c 10", 1.0, "max"),
]


def ratio_row(key: str, values: list[float], target: float, bound: str) -> dict:
    """A row of the table: the median of the rounds' ratios ``values`` and whether it meets
    ``target`` (``bound`` "min": at least it; "max": at most it). No values: not measured."""
    if not values:
        return {"key": key, "median": None, "runs": [], "target": target, "bound": bound,
                "verdict": "SKIP"}
    median = round(statistics.median(values), 3)  # judged as shown: no 0.950 that misses 0.95
    ok = median >= target if bound == "min" else median <= target
    return {"key": key, "median": median, "runs": [round(v, 3) for v in values],
            "target": target, "bound": bound, "verdict": "PASS" if ok else "MISS"}


def round_ratios(got: dict, cores: int) -> dict:
    """One round's ratios from its steps' figures (``got``: step -> run_jobs-like dict with
    ``rate`` and ``redis_us``; a missing step leaves its ratios out)."""
    out = {}
    q = got["queued"]
    pairs = {"vs-bare": ("bare", "rate"), "vs-sidekiq": ("sidekiq", "rate")}
    for key, (step, field) in pairs.items():
        if step in got:
            out[key] = q[field] / got[step][field]
    for key in ("task", "log-text", "log-json"):
        if key in got:
            out[key] = got[key]["rate"] / q["rate"]
    if "cpu" in got:
        out["cpu"] = got["cpu"]["rate"] / (cores * 1000 / CPU_MS)
    if "sidekiq" in got:
        out["redis-cpu"] = q["redis_us"] / got["sidekiq"]["redis_us"]
    return out


def table(rows: list[dict]) -> str:
    labels = {k: label for k, label, _, _ in RATIOS}
    lines = ["| ratio | median | rounds | target | |", "|---|---|---|---|---|"]
    for row in rows:
        target = ("≥ " if row["bound"] == "min" else "≤ ") + f"{row['target']:g}"
        median = "-" if row["median"] is None else f"{row['median']:.3f}"
        lines.append(f"| {labels[row['key']]} | {median} "
                     f"| {', '.join(f'{v:.2f}' for v in row['runs'])} | {target} "
                     f"| {row['verdict']} |")
    return "\n".join(lines)


def _sidekiq(url: str, args):
    """The side-by-side table's Sidekiq row (bench_configs), or (None, why) if it cannot run."""
    if shutil.which("sidekiq") is None or subprocess.run(
            ["ruby", "-e", 'require "sidekiq"'], capture_output=True).returncode != 0:
        return None, None, "Sidekiq is not installed (Debian: apt-get install ruby-sidekiq)"
    from bench_configs import Catalogue, select
    from bench_peers import ensure_ruby_hiredis
    catalogue = Catalogue(url, os.path.join(os.path.abspath(args.venv), "bin"), args)
    (system,) = select(catalogue.all(), "sidekiq")
    try:
        ensure_ruby_hiredis([system])
    except (SystemExit, subprocess.CalledProcessError) as e:
        catalogue.close()
        return None, None, f"Sidekiq's hiredis driver is missing: {e}"
    return system, catalogue, ""


def steps(url: str, args, sidekiq) -> dict:
    """Step name -> a function running it once and returning its figures."""
    import bench_jobs  # (here: importing this module defines no job classes)
    c, n = args.concurrency, args.jobs
    off = {"job_logging": False}

    def queued_run(extra, jobs=n, **kw):
        def run():
            sink = CatSink()
            try:
                x = run_jobs(url, jobs, c, extra, sink=sink, **kw)
            finally:
                x_lines = sink.close()
            on = extra["job_logging"]
            if (x_lines >= jobs) != on:
                raise SystemExit(f"job_logging {on}: {x_lines} log lines for {jobs} jobs")
            if kw.get("task") and x["progress"]["finished"] != jobs:
                raise SystemExit(f"task counts {x['progress']}, {jobs} jobs ran")
            return {**x, "lines": x_lines}
        return run

    def cpu_run():
        stamps = Stamps()  # (the jobs record their finish in files: bench_jobs.CpuJob says why)
        try:
            return queued_run(off, jobs=args.cpu_jobs, job=bench_jobs.CpuJob, stamps=stamps,
                              more=(CPU_MS, stamps.dir))()
        finally:
            stamps.close()

    out = {
        "queued": queued_run(off),
        "bare": lambda: {"rate": baseline(url, n, c)},
        "task": queued_run(off, task=True),
        "cpu": cpu_run,
        "log-text": queued_run({"job_logging": True}),
        "log-json": queued_run({"job_logging": True, "log_format": "json"}),
    }
    if sidekiq is not None:
        import bench_peers

        def sidekiq_run():
            x = bench_peers.workload(sidekiq, redis.Redis.from_url(url), n)
            return {"rate": x["throughput"], "redis_us": x["redis_cpu_us"]}
        out["sidekiq"] = sidekiq_run
    return out


def _versus(us: float, figures: dict, name: str, field: str) -> str:
    """What a variant of the no-op run (a task's, the log steps') adds to its CPU per job."""
    if name not in ("task", "log-text", "log-json"):
        return ""
    base = statistics.median(x[field] for x in figures["queued"])
    return f" ({(us - base) / base:+.0%} on queued's)" if base else ""


def _commit() -> str | None:
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    return git.stdout.strip() or None


def run(args) -> None:
    from bench_peers import rotated, save
    t_start = time.time()
    cores = len(os.sched_getaffinity(0))
    server = RedisServer(args.redis_server)
    queued.configure(url=server.url)  # the jobs are pushed from this process
    sidekiq, catalogue, why = _sidekiq(server.url, args)
    if sidekiq is None:
        print(f"{why}: the rows against Sidekiq are left out", flush=True)
    figures: dict[str, list[dict]] = {}
    per_round: list[dict] = []
    try:
        todo = steps(server.url, args, sidekiq)
        for round_no in range(args.runs):
            got = {}
            for name in rotated(list(todo), round_no):
                try:
                    got[name] = todo[name]()
                except Exception as e:  # noqa: BLE001 - a peer's trouble leaves queued's rows
                    if name != "sidekiq":
                        raise
                    print(f"round {round_no + 1} sidekiq   FAILED: {e}", flush=True)
                    continue
                figures.setdefault(name, []).append(got[name])
                extra = (f", Redis {got[name]['redis_us']:.0f} us/job"
                         if "redis_us" in got[name] else "")
                print(f"round {round_no + 1} {name:9s} {got[name]['rate']:8,.0f} jobs/s{extra}"
                      f"  (load {os.getloadavg()[0]:.1f})", flush=True)
            per_round.append(round_ratios(got, cores))
    finally:
        if catalogue is not None:
            catalogue.close()
        server.stop()
    rows = [ratio_row(key, [r[key] for r in per_round if key in r], target, bound)
            for key, _, target, bound in RATIOS]
    seconds = time.time() - t_start
    payload = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "commit": _commit(), "queued": queued.__version__, "jobs": args.jobs,
               "cpu_jobs": args.cpu_jobs, "rounds": args.runs, "concurrency": args.concurrency,
               "cores": cores, "seconds": round(seconds), "load": round(os.getloadavg()[0], 2),
               "sidekiq": why or "ran", "ratios": rows,
               "steps": {k: [{f: round(v, 1) for f, v in x.items() if isinstance(v, float)}
                             for x in xs] for k, xs in figures.items()}}
    out = save("quick", payload, indent=None)
    print(f"\nqueued {queued.__version__} ({payload['commit']}), -c {args.concurrency}, "
          f"{args.jobs:,} jobs ({args.cpu_jobs:,} CPU-bound) x {args.runs} rounds, "
          f"{seconds:.0f} s; load average {payload['load']:.1f} at the end; {out}\n")
    print(table(rows) + "\n")
    for name, xs in figures.items():
        rate = statistics.median(x["rate"] for x in xs)
        said = [f"{rate:,.0f} jobs/s (rounds " + ", ".join(f"{x['rate']:,.0f}" for x in xs) + ")"]
        for field, what in (("worker_us", "workers' CPU"), ("redis_us", "Redis CPU")):
            if field in xs[0]:
                us = statistics.median(x[field] for x in xs)
                said.append(f"{what} {us:.0f} us/job" + _versus(us, figures, name, field))
        print(f"- {name}: " + "; ".join(said))
    if sidekiq is None:
        print(f"- sidekiq: {why}")
