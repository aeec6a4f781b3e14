"""Jobs that wait (issue 17): ``scripts/bench --waiting 0.02`` (and ``--waiting 0.2``). Most jobs
in production wait on something (an HTTP call, a query, mail); this runs queued's workers of
many jobs at once beside the peers that run many per process, at equal jobs at once, on one
Redis, interleaved, each job waiting ``--waiting`` seconds without CPU and then doing the no-op
job's one INCR. The table's rows (``--systems``, a comma list; default all):

    queued          queued -c 2 --threads T: 2 processes of T threads (T = --at-once / 2),
                    sync jobs that time.sleep
    queued-async    the same processes, async jobs that await asyncio.sleep
    queued-wide     queued -c 2 --threads W (--wide, default 2 x --at-once): as many threads
                    as fit in the PSS of the two Sidekiq processes (measure, then set --wide)
    queued-procs    queued -c P, one thread each (--procs, default 20: the issue's row)
    sidekiq-x2      two sidekiq -c T (T threads each; Debian's Sidekiq 6.4, hiredis, YJIT in
                    16 MiB, as scripts/bench_configs.py's best), jobs that sleep
    dramatiq        dramatiq -p 2 -t T, dramatiq_queue_prefetch=64
    huey            huey_consumer -k thread -w 2T (one process: Huey cannot run threads in
                    several processes)
    saq             saq --workers 2, T async jobs each (SAQ 0.26, async only)
    queued-async-2x100, saq-2x100   the async comparison at 2 x 100 (--async-at-once)

Each of ``--runs`` rounds fills ``--wait-jobs`` jobs in bulk through the system's own API,
starts it, and times jobs/s after the warm-up (the first tenth, as scripts/bench_peers.py);
the limit a system can reach is jobs at once / wait (50 / 20 ms = 2,500 jobs/s), and the table
says what share of it each reached. PSS of the process tree: idle (after 5 jobs and 1 s) and
right after the run. The peers run from their virtualenvs (the peers' of scripts/bench_peers.py,
var/bench-venv; SAQ's, which needs redis < 8, build/bench-saq-venv), made on first use; never
from queued's own dependencies.

Run it on a quiet machine (every core free): a run on a shared box measures the neighbours.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import redis

from bench_configs import PEERS_DIR, System
from bench_peers import STOP_TIMEOUT, drive, ensure_ruby_hiredis, ensure_venv, save, start
from benchlib import ROOT, RedisServer, rates, write_queued_config

SAQ_PACKAGES = ["saq[redis,hiredis]==0.26.4"]
ROWS = ("queued", "queued-async", "queued-wide", "queued-procs", "sidekiq-x2", "dramatiq",
        "huey", "saq", "queued-async-2x100", "saq-2x100")


def saq_venv(path: str) -> str:
    py = os.path.join(path, "bin", "python")
    if not os.path.exists(py):
        print(f"creating {path} (python -m venv) for SAQ", flush=True)
        subprocess.run([sys.executable, "-m", "venv", path], check=True)
    if subprocess.run([py, "-c", "import saq"], capture_output=True).returncode != 0:
        print(f"pip installing into {path}: {' '.join(SAQ_PACKAGES)}", flush=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *SAQ_PACKAGES], check=True)
    return os.path.dirname(py)


class Systems:
    """The rows, built against one Redis; owns the queued config files it writes."""

    def __init__(self, url: str, args):
        self.url, self.args = url, args
        self.base = dict(os.environ, BENCH_REDIS_URL=url, REDIS_URL=url, PYTHONUNBUFFERED="1",
                         BENCH_WAIT=str(args.waiting))
        self.files: list[str] = []
        self.venv = self.saq = None

    def close(self) -> None:
        for f in self.files:
            os.unlink(f)

    def build(self, name: str) -> tuple[System, int]:
        """(the system, its jobs at once)."""
        a = self.args
        per = a.at_once // 2
        if name == "queued":
            return self._queued(name, 2, per, False), 2 * per
        if name == "queued-async":
            return self._queued(name, 2, per, True), 2 * per
        if name == "queued-async-2x100":
            return self._queued(name, 2, a.async_at_once // 2, True), a.async_at_once
        if name == "queued-wide":
            return self._queued(name, 2, a.wide // 2, False), a.wide
        if name == "queued-procs":
            return self._queued(name, a.procs, 1, False), a.procs
        if name == "sidekiq-x2":
            env = dict(self.base, BENCH_SIDEKIQ_DRIVER="hiredis", RUBY_YJIT_ENABLE="1",
                       RUBYOPT="--yjit-exec-mem-size=16", BENCH_SIDEKIQ_JOB="WaitJob")
            cmd = ["sidekiq", "-r", os.path.join(PEERS_DIR, "sidekiq_jobs.rb"), "-c", str(per),
                   "-q", "default"]
            return System(name, "sidekiq", f"2 x sidekiq -c {per}, hiredis, YJIT 16 MiB",
                          [cmd] * 2, ["ruby", os.path.join(PEERS_DIR, "sidekiq_drive.rb")],
                          env), 2 * per
        if name == "dramatiq":
            cmd = [self._bin("dramatiq"), "dramatiq_wait", "--path", PEERS_DIR, "-p", "2",
                   "-t", str(per)]
            s = self._peer(name, f"dramatiq -p 2 -t {per}, prefetch 64", [cmd], "dramatiq_wait")
            s.env["dramatiq_queue_prefetch"] = "64"
            return s, 2 * per
        if name == "huey":
            cmd = [self._bin("huey_consumer"), "huey_wait.huey", "-k", "thread", "-w",
                   str(2 * per), "-q"]
            return self._peer(name, f"huey_consumer -k thread -w {2 * per}", [cmd],
                              "huey_wait"), 2 * per
        if name in ("saq", "saq-2x100"):
            each = per if name == "saq" else a.async_at_once // 2
            if self.saq is None:
                self.saq = saq_venv(os.path.abspath(a.saq_venv))
            cmd = [os.path.join(self.saq, "saq"), "saq_wait.settings", "--workers", "2", "-q"]
            env = dict(self.base, PYTHONPATH=PEERS_DIR, BENCH_SAQ_CONCURRENCY=str(each))
            return System(name, "saq", f"saq --workers 2, concurrency {each} (async)", [cmd],
                          [os.path.join(self.saq, "python"),
                           os.path.join(PEERS_DIR, "drive.py"), "saq_wait"], env), 2 * each
        raise SystemExit(f"unknown system {name!r}; rows: {', '.join(ROWS)}")

    def _queued(self, name: str, procs: int, threads: int, is_async: bool) -> System:
        cfg = write_queued_config(self.url, procs, {"job_logging": False, "threads": threads})
        self.files.append(cfg)
        env = dict(self.base, PYTHONPATH=ROOT, BENCH_ASYNC="1" if is_async else "0")
        return System(name, "queued", f"queued -c {procs} --threads {threads}"
                      + (", async jobs" if is_async else ""),
                      [[sys.executable, "-m", "queued", "-C", cfg]],
                      [sys.executable, os.path.join(PEERS_DIR, "drive.py"), "queued_wait"], env)

    def _bin(self, name: str) -> str:
        if self.venv is None:
            self.venv = ensure_venv(os.path.abspath(self.args.venv))
        return os.path.join(self.venv, name)

    def _peer(self, name, how, servers, module) -> System:
        py = self._bin("python")
        return System(name, name, how, servers, [py, os.path.join(PEERS_DIR, "drive.py"),
                                                 module], dict(self.base, PYTHONPATH=PEERS_DIR))


def wait_last(r, tree, timeout: float) -> None:
    deadline = time.time() + timeout
    while r.get("bench:last") is None:
        if not tree.alive():
            raise RuntimeError("the system exited")
        if time.time() > deadline:
            raise TimeoutError(f"no bench:last after {timeout:.0f} s "
                               f"(bench:done={r.get('bench:done')})")
        time.sleep(0.01)


def one_run(system: System, r, n: int, limit: float) -> dict:
    r.flushall()
    drive(system, "fill", "bulk", n, n)
    load = os.getloadavg()[0]
    tree = start(system)
    try:
        wait_last(r, tree, 120 + 3 * n / limit)
        time.sleep(1.0)
        pss_after = tree.pss_mib()
    finally:
        tree.stop(STOP_TIMEOUT)
    after_warm, from_first = rates(r, n)
    r.flushall()
    tree = start(system)  # idle PSS, on a fresh one, after 5 jobs
    try:
        drive(system, "fill", "bulk", 5, 5)
        wait_last(r, tree, 60)
        time.sleep(1.0)
        pss_idle = tree.pss_mib()
    finally:
        tree.stop(STOP_TIMEOUT)
    return {"throughput": after_warm, "from_first": from_first, "pss_after": pss_after,
            "pss_idle": pss_idle, "load": load}


def run(args) -> None:
    t0 = time.time()
    server = RedisServer(args.redis_server)
    built = Systems(server.url, args)
    r = redis.Redis.from_url(server.url)
    names = ROWS if args.systems == "all" else tuple(args.systems.split(","))
    try:
        systems = [built.build(name) for name in names]
        ensure_ruby_hiredis([s for s, _ in systems if s.group == "sidekiq"
                             and s.env.setdefault("BENCH_SIDEKIQ_DRIVER", "hiredis")])
        results = {s.name: [] for s, _ in systems}
        for run_no in range(args.runs):
            k = run_no % len(systems)
            for s, at_once in systems[k:] + systems[:k]:
                limit = at_once / args.waiting
                try:
                    x = one_run(s, r, args.wait_jobs, limit)
                except Exception as e:  # noqa: BLE001 - one system's trouble is reported
                    print(f"run {run_no + 1} {s.name:20s} FAILED: {e}", flush=True)
                    continue
                results[s.name].append(x)
                print(f"run {run_no + 1} {s.name:20s} {x['throughput']:8,.0f} jobs/s "
                      f"({x['throughput'] / limit:.0%} of {limit:,.0f}), PSS idle "
                      f"{x['pss_idle']:.1f} MiB, after {x['pss_after']:.1f} MiB "
                      f"(load {x['load']:.1f})", flush=True)
    finally:
        built.close()
        server.stop()
    rows = []
    for s, at_once in systems:
        xs = results[s.name]
        if xs:
            rows.append({"name": s.name, "how": s.how, "at_once": at_once,
                         "limit": at_once / args.waiting,
                         "throughput": statistics.median(x["throughput"] for x in xs),
                         "runs": [round(x["throughput"]) for x in xs],
                         "pss_idle": statistics.median(x["pss_idle"] for x in xs),
                         "pss_after": statistics.median(x["pss_after"] for x in xs)})
    out = save("waiting", {"args": vars(args), "rows": rows, "raw": results})
    print(f"\n{args.wait_jobs:,} jobs waiting {args.waiting * 1000:g} ms each x {args.runs} "
          f"runs, {time.time() - t0:.0f} s; raw figures in {out}\n")
    print(table(rows))


def table(rows) -> str:
    lines = ["| system | jobs at once | jobs/s (median) | share of the limit | runs "
             "| PSS idle | PSS after |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['name']}: {row['how']} | {row['at_once']} "
                     f"| {row['throughput']:,.0f} | {row['throughput'] / row['limit']:.0%} "
                     f"| {', '.join(f'{x:,}' for x in row['runs'])} "
                     f"| {row['pss_idle']:.1f} MiB | {row['pss_after']:.1f} MiB |")
    return "\n".join(lines)


def add_arguments(ap) -> None:
    g = ap.add_argument_group("jobs that wait (--waiting): queued's threads and async jobs "
                              "beside Sidekiq, Dramatiq, Huey and SAQ (scripts/bench_wait.py)")
    g.add_argument("--waiting", type=float, metavar="SECONDS",
                   help="each job waits this long (0.02, 0.2): run this comparison")
    g.add_argument("--systems", default="all", help=f"comma list of rows: {', '.join(ROWS)}")
    g.add_argument("--at-once", type=int, default=50,
                   help="jobs at once of every row (default 50: 2 processes x 25)")
    g.add_argument("--async-at-once", type=int, default=200,
                   help="jobs at once of the async comparison rows (default 200: 2 x 100)")
    g.add_argument("--wide", type=int, default=100,
                   help="queued-wide's jobs at once (set it to what fits in sidekiq-x2's PSS)")
    g.add_argument("--procs", type=int, default=20, help="queued-procs' processes (default 20)")
    g.add_argument("--wait-jobs", type=int, default=10000,
                   help="jobs per run (default 10,000: 4 s at 2,500 jobs/s)")
    g.add_argument("--saq-venv", default=os.path.join(ROOT, "build", "bench-saq-venv"),
                   help="SAQ's virtualenv, made if missing (default build/bench-saq-venv)")


if __name__ == "__main__":  # (scripts/bench --waiting is the way in)
    print(json.dumps({"rows": list(ROWS)}))
