#!/usr/bin/env python3
"""Instructions per job, counted by valgrind's callgrind: what a job costs queued's processes and
Redis, exactly, whatever else runs on the machine (jobs/s and CPU seconds move with the host's
load; instruction counts do not). Run by hand; docs/benchmarks.md has the method and figures.

    scripts/bench_instr.py                       # the daemon (master + 2 workers), no-op jobs
    scripts/bench_instr.py --redis               # and Redis's instructions per job
    scripts/bench_instr.py --set job_logging=true --set log_format=json
    scripts/bench_instr.py --task                # the jobs inside a queued.Task
    scripts/bench_instr.py --job CpuJob          # jobs that burn 1 ms of their own CPU
    scripts/bench_instr.py --drop title,context  # without those pieces (bench_instr_jobs.DROPS)
    scripts/bench_instr.py --tree /tmp/q-acf707a # another checkout (any commit since acf707a)
    scripts/bench_instr.py --own                 # the job's own code alone, in one process
    scripts/bench_instr.py --bare                # the bare BRPOP loop's process, per job
    scripts/bench_instr.py --sidekiq             # Sidekiq's Redis instructions per job (--redis)
    scripts/bench_instr.py --line json           # a done line alone (JobLog.done), per line

Method: the daemon runs ``python -m queued`` under ``valgrind --tool=callgrind
--trace-children=yes`` (each process writes its own count), on a redis-server of its own, on
``--jobs`` no-op jobs pushed before it starts, twice: with N1 and N2 jobs. The difference of the
two runs' counts divided by N2 - N1 is the cost of one job in steady state, without the start
and the stop. Callgrind counts user-space instructions only: a system call counts as the
instructions that make it, not the kernel's work (``--syscalls`` counts those apart, with
strace). The worker's choices that depend on the clock (a batch grows while jobs are short, its
acks ride with the next reserve and none go out inside it, the master's give-back of a held
batch, the millisecond a done line's head is kept for) are pinned to what a native run does
(scripts/bench_instr_jobs.py), since valgrind runs everything 40-50x slower.
The master's count includes its timers (heartbeat, scheduler polls), which under valgrind's
slow-down come ~45x more often per job than natively: read it as an upper bound.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

import redis  # noqa: E402

from benchlib import free_port, push_bulk  # noqa: E402

PY = os.path.realpath(sys.executable)  # (pyenv's python3 is a shell script: valgrind needs the binary)
VALGRIND = ["valgrind", "--tool=callgrind", "--trace-children=yes"]


def totals(path: str) -> int:
    with open(path, "rb") as f:
        for line in f:
            if line.startswith((b"summary:", b"totals:")):
                return int(line.split()[1])
    raise SystemExit(f"{path}: no totals (did the process end by SIGKILL?)")


class Redis:
    """A redis-server of our own on a free port; under callgrind with ``out_dir``."""

    def __init__(self, out_dir: str | None, binary: str):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="queued-instr-redis-")
        cmd = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", self.dir]
        self.out = os.path.join(out_dir, "redis.cg") if out_dir else None
        if self.out:
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}"] + cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dumps = 0
        r = redis.Redis.from_url(self.url)
        for _ in range(1000):
            try:
                r.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def count(self) -> int:
        """Redis's instructions since the last call (callgrind_control dumps the count so far
        to a file of its own and starts again from 0)."""
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.dumps += 1
        path = f"{self.out}.{self.dumps}"
        for _ in range(600):
            if os.path.exists(path):
                try:
                    return totals(path)
                except SystemExit:
                    pass  # (being written)
            time.sleep(0.05)
        raise SystemExit(f"callgrind_control wrote no {path}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)
        shutil.rmtree(self.dir, ignore_errors=True)


def push(url: str, n: int, job: str, task: bool) -> None:
    import queued
    import bench_instr_jobs
    queued.configure(url=url)
    if job == "BenchJob" and not task:
        push_bulk(n)
        return
    cls = getattr(bench_instr_jobs, job)
    args = [[n]] * n
    if task:
        with queued.Task("bench"):
            for start in range(0, n, 1000):
                cls.perform_bulk(args[start:start + 1000])
    else:
        for start in range(0, n, 1000):
            cls.perform_bulk(args[start:start + 1000])


def wait_done(r, n: int, alive, timeout: float = 3600) -> None:
    deadline = time.time() + timeout
    while int(r.get("bench:done") or 0) < n:
        if not alive():
            raise SystemExit("the measured system exited early")
        if time.time() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.05)


class Daemon:
    """``python -m queued`` on the bench's job file (under callgrind with ``counted``), its
    stderr through a pipe drained by ``cat`` into a file (as a service's log is drained)."""

    def __init__(self, args, url: str, out_dir: str, counted: bool):
        config = {"redis_url": url, "concurrency": args.concurrency,
                  "require": [os.path.join(HERE, "bench_instr_jobs.py")],
                  "job_logging": False, **args.settings}
        cfg = os.path.join(out_dir, "queued.yml")
        with open(cfg, "w") as f:
            json.dump(config, f)
        env = dict(os.environ, PYTHONPATH=args.tree, BENCH_INSTR_DROP=args.drop or "")
        self.log_path = os.path.join(out_dir, "daemon.log")
        self.log = open(self.log_path, "wb")
        self.cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=self.log)
        prefix = VALGRIND + [f"--callgrind-out-file={out_dir}/cg.%p"] if counted else []
        self.proc = subprocess.Popen(prefix + [PY, "-m", "queued", "-C", cfg],
                                     stdout=subprocess.DEVNULL, stderr=self.cat.stdin, env=env,
                                     cwd=out_dir)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        """Stop it (TERM, as an operator); the lines it logged."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(600)
        self.cat.stdin.close()
        self.cat.wait()
        self.log.close()
        with open(self.log_path, "rb") as f:
            return f.read().count(b"\n")


def daemon_run(args, n: int, out_dir: str) -> dict[str, int]:
    """One run of the daemon under callgrind on n jobs: instructions by process."""
    server = Redis(None, args.redis_server)
    try:
        r = redis.Redis.from_url(server.url)
        push(server.url, n, args.job, args.task)
        d = Daemon(args, server.url, out_dir, counted=True)
        try:
            wait_done(r, n, d.alive)
        finally:
            lines = d.stop()
        found = {"master": 0, "workers": 0}
        for name in os.listdir(out_dir):
            m = re.fullmatch(r"cg\.(\d+)", name)
            if m:
                count = totals(os.path.join(out_dir, name))
                found["master" if int(m.group(1)) == d.proc.pid else "workers"] += count
        found["log_lines"] = lines
    finally:
        server.stop()
    return found


#: Seconds of idle Redis (and system) measured after each run, to take its timers out.
IDLE = 3.0


def redis_run(args, n: int, out_dir: str) -> dict[str, int]:
    """Redis under callgrind, the system (--system) running natively, on n jobs pushed before
    it starts: Redis's instructions during the run, less what Redis spends when the system
    idles (its cron, the daemon's timers) for as long. The system's own count is not taken."""
    server = Redis(out_dir, args.redis_server)
    try:
        r = redis.Redis.from_url(server.url)
        if args.system == "sidekiq":
            system = Sidekiq(args, server.url, n)
        else:
            push(server.url, n, args.job, args.task)
            system = (Daemon(args, server.url, out_dir, counted=False) if args.system == "queued"
                      else Bare(server.url, n))
        try:
            server.count()
            t0 = time.monotonic()
            wait_done(r, n, system.alive)
            busy, t1 = server.count(), time.monotonic()
            time.sleep(IDLE)
            idle, t2 = server.count(), time.monotonic()
        finally:
            system.stop()
    finally:
        server.stop()
    rate = idle / (t2 - t1)
    return {"redis": round(busy - rate * (t1 - t0)), "idle_per_s": round(rate),
            "seconds": round(t1 - t0, 2)}


class Bare:
    """The bare at-most-once loop (benchlib._brpop_loop) in ``-c`` processes."""

    def __init__(self, url: str, n: int):
        import benchlib
        import multiprocessing
        self.procs = [multiprocessing.Process(target=benchlib._brpop_loop, args=(url, n))
                      for _ in range(2)]
        for p in self.procs:
            p.start()

    def alive(self) -> bool:
        return any(p.is_alive() for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            p.join(30)


class Sidekiq:
    """Sidekiq as the side-by-side table runs it (bench_configs.CHOSEN["sidekiq"]: one
    process, -c 10, redis-rb's hiredis driver, YJIT), its jobs pushed by its own producer."""

    def __init__(self, args, url: str, n: int):
        import bench_configs
        import bench_peers
        self.catalogue = bench_configs.Catalogue(url, os.path.dirname(PY), args)
        (system,) = bench_configs.select(self.catalogue.all(), args.sidekiq_row)
        bench_peers.drive(system, "fill", "bulk", n, n)
        self.tree = bench_peers.start(system)

    def alive(self) -> bool:
        return self.tree.alive()

    def stop(self) -> None:
        self.tree.stop()
        self.catalogue.close()


def own_run(args, n: int, out_dir: str) -> dict[str, int]:
    """The job's own code in one process: BenchJob.perform n times through get_redis(), with
    the worker's dedicated connection (client.dedicate_job_connection)."""
    server = Redis(None, args.redis_server)
    try:
        code = ("import sys; sys.path[:0] = [%r]\n"
                "import queued, bench_jobs\n"
                "from queued import client\n"
                "queued.configure(url=%r); client.dedicate_job_connection()\n"
                "job = bench_jobs.BenchJob()\n"
                "for _ in range(%d): job.perform(%d)\n") % (HERE, server.url, n, 10 * n)
        out = os.path.join(out_dir, "cg.own")
        env = dict(os.environ, PYTHONPATH=args.tree)
        subprocess.run(VALGRIND + [f"--callgrind-out-file={out}", PY, "-c", code], check=True,
                       env=env, stderr=subprocess.DEVNULL)
        return {"own": totals(out)}
    finally:
        server.stop()


def bare_run(args, n: int, out_dir: str) -> dict[str, int]:
    """The bare at-most-once loop (benchlib._brpop_loop) in one process under callgrind."""
    server = Redis(None, args.redis_server)
    try:
        push(server.url, n, "BenchJob", False)
        code = ("import sys; sys.path[:0] = [%r, %r]\n"
                "import benchlib; benchlib._brpop_loop(%r, %d)\n") % (ROOT, HERE, server.url, n)
        out = os.path.join(out_dir, "cg.bare")
        proc = subprocess.Popen(VALGRIND + [f"--callgrind-out-file={out}", PY, "-c", code],
                                stderr=subprocess.DEVNULL)
        proc.wait(3600)
        return {"bare": totals(out)}
    finally:
        server.stop()


def snippet_run(args, n: int, out_dir: str) -> dict[str, int]:
    """``--snippet SETUP STMT``: STMT n times after SETUP, in one process (timeit's way)."""
    setup, stmt = args.snippet
    code = ("import sys; sys.path[:0] = [%r, %r]\n%s\nfor _ in range(%d):\n    %s\n"
            % (args.tree, HERE, setup, n, stmt))
    out = os.path.join(out_dir, "cg.snippet")
    subprocess.run(VALGRIND + [f"--callgrind-out-file={out}", PY, "-c", code], check=True,
                   stderr=subprocess.DEVNULL)
    return {"snippet": totals(out)}


#: ``--line``: done lines as a worker of one job at a time writes them (its clock pinned as
#: bench_instr_jobs pins it, a batch's lines flushed together, to /dev/null), each from a
#: payload as queued's client writes it. (Trees since JobLog.done took a reservation.)
LINE_CODE = """
import os, sys
sys.path[:0] = [%(here)r]
import bench_instr_jobs  # (the clock's pin)
from queued.server import log
from queued.server.reserved import Reservation
os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
log.setup("INFO", None, "w1", %(format)r)
joblog = log.JobLog("queued.worker")
joblog.bind()
assert joblog.handler is not None
payload = (b'{"class":"bench_jobs.BenchJob","args":[1],"retry":true,"queue":"default",'
           b'"jid":"8f3b2c1d0e9a7b6c5d4e3f2a","created_at":1796668686.745,'
           b'"enqueued_at":1796668686.745}')
res = Reservation(payload, "default", payload)
times = [0.000040 + i * 0.0000037 for i in range(32)]  # (a no-op job's spread)

def lines(n):
    done, flush = joblog.done, joblog.flush
    for batch in [times] * (n // 32) + [times[:n %% 32]]:
        for elapsed in batch:
            done("bench_jobs.BenchJob", "8f3b2c1d0e9a7b6c5d4e3f2a", elapsed, res)
        flush()

lines(%(n)d)
"""


def line_run(args, n: int, out_dir: str) -> dict[str, int]:
    """``--line FORMAT``: n done lines in a process of its own."""
    code = LINE_CODE % {"here": HERE, "format": args.line, "n": n}
    out = os.path.join(out_dir, "cg.line")
    env = dict(os.environ, PYTHONPATH=args.tree)
    subprocess.run(VALGRIND + [f"--callgrind-out-file={out}", PY, "-c", code], check=True,
                   env=env)
    return {"line": totals(out)}


RUNS = {"daemon": daemon_run, "own": own_run, "bare": bare_run, "redis": redis_run,
        "snippet": snippet_run, "line": line_run}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", default="1000,3000", help="N1,N2 (default 1000,3000)")
    ap.add_argument("-c", "--concurrency", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="a config setting for the daemon (value as JSON: true, 4, \"json\")")
    ap.add_argument("--task", action="store_true", help="the jobs inside one queued.Task")
    ap.add_argument("--job", default="BenchJob", help="BenchJob (no-op) or CpuJob (1 ms of CPU)")
    ap.add_argument("--drop", help="pieces to replace with nothing (bench_instr_jobs.py)")
    ap.add_argument("--tree", default=ROOT, help="the checkout whose queued runs")
    ap.add_argument("--keep", help="keep the callgrind files under this folder")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--redis", nargs="?", const="queued", choices=("queued", "bare", "sidekiq"),
                      dest="system", help="count Redis's instructions (not the system's) with "
                      "queued (the default), the bare loop or Sidekiq running natively")
    mode.add_argument("--own", action="store_true", help="the job's own code alone")
    mode.add_argument("--bare", action="store_true", help="the bare BRPOP loop's process")
    mode.add_argument("--snippet", nargs=2, metavar=("SETUP", "STMT"),
                      help="a statement's instructions, in a process of its own")
    mode.add_argument("--line", choices=("text", "json"),
                      help="a done line's own instructions (JobLog.done), in one process")
    ap.add_argument("--sidekiq-row", default="sidekiq",
                    help="which Sidekiq (a row or configuration of scripts/bench_configs.py)")
    ap.add_argument("--redis-server", default=shutil.which("redis-server", path="/usr/bin")
                    or "redis-server")
    args = ap.parse_args()
    args.settings = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    args.tree = os.path.abspath(args.tree)
    args.slow_jobs = 1000  # (bench_configs.Catalogue reads it)
    kind = ("redis" if args.system else "own" if args.own else "bare" if args.bare
            else "snippet" if args.snippet else "line" if args.line else "daemon")
    n1, n2 = (int(x) for x in args.jobs.split(","))
    runs = []
    for n in (n1, n2):
        out_dir = tempfile.mkdtemp(prefix=f"queued-instr-{n}-", dir=args.keep)
        t0 = time.time()
        runs.append(RUNS[kind](args, n, out_dir))
        print(f"{n} jobs: {runs[-1]} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        if not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)
    per_job = {k: (runs[1][k] - runs[0][k]) / (n2 - n1) for k in ("master", "workers", "redis",
                                                                  "own", "bare", "snippet",
                                                                  "line")
               if k in runs[1]}
    label = " ".join(filter(None, [kind if kind != "redis" else f"redis ({args.system})",
                                   args.line or "",
                                   " ".join(args.set), "task" if args.task else "",
                                   args.job if args.job != "BenchJob" else "",
                                   f"drop={args.drop}" if args.drop else "",
                                   f"c={args.concurrency}" if args.concurrency != 2 else ""]))
    print(f"{label}: instructions per job " + ", ".join(
        f"{k} {v:,.0f}" for k, v in per_job.items()))
    print(json.dumps({"label": label, "tree": args.tree, "jobs": [n1, n2], "runs": runs,
                      "per_job": per_job}))


if __name__ == "__main__":
    main()
