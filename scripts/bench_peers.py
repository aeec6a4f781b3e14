"""queued beside its peers, on one Redis, with one workload, interleaved: ``scripts/bench --peers``.

Systems: queued (2 worker processes), real Sidekiq 6.4 (Debian's Ruby, one process, -c 10),
Huey (-k process -w 2), Dramatiq (-p 2 -t 1, and -p 2 with its default 8 threads), RQ (two
``rq worker`` processes) and Celery (prefork -c 2); and, for scale, a bare at-most-once BRPOP
loop in 2 processes. The Python peers live in their own virtualenv (var/bench-venv by default,
made and filled with PEER_PACKAGES on first use), never in queued's dependencies; their job
modules and the producer drivers are in scripts/peers/.

Each of ``--runs`` rounds goes over every system in turn (the order rotates from round to
round) so machine noise hits all alike, and each step starts from FLUSHALL:

1. enqueue rate one by one: ``--enqueue-jobs`` jobs through the system's own producer API;
2. enqueue rate in bulk: ``--jobs`` jobs through its bulk API (or its many-jobs API where it
   has no bulk write), batches of 1,000; these jobs are the throughput workload;
3. throughput: start the system, jobs/s = jobs / (finish of the last job - finish of the first),
   as SIDEKIQ_FORMAT.md section 9; then PSS of its process tree 1 s after the last job; stop;

then the bare loop and a bare PING loop on a raw socket (the round-trip ceiling of any
one-by-one producer at that moment: on a VM it moves with the host's load), and then, per
system, on a freshly started one:

4. PSS of the whole process tree, idle (after 5 warm-up jobs and 1 s);
5. pickup latency: ``--samples`` jobs enqueued one at a time, 20 ms apart; each records
   now - the enqueue time it was given in its args;
6. schedule lateness: ``--samples`` jobs due over 0.5-5 s through the system's own delayed-job
   API; each records now - its due time. Sidekiq's poller only starts 5-15 s after boot, so this
   step waits until 16 s after Sidekiq started (its steady state, not its boot, is measured).

Every job is a no-op that INCRs one key (scripts/bench_jobs.py, scripts/peers/common.py,
scripts/peers/sidekiq_jobs.rb). Per-job log lines are off everywhere. A system is stopped by PID
after each step: SIGTERM, then SIGKILL for whatever of its tree is left after 20 s.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import redis

import queued
from benchlib import (HERE, ROOT, ProcessTree, RedisServer, bare_round_trips, baseline,
                      collect, pct, write_queued_config)

PEERS_DIR = os.path.join(HERE, "peers")
#: What the peers' virtualenv holds. Pinned so that a rerun measures the same code; hiredis
#: because queued has it (redis-py picks it up by itself).
PEER_PACKAGES = ["huey==3.5.4", "dramatiq[redis]==2.2.1", "rq==2.12.0", "celery[redis]==5.7.0",
                 "redis==8.1.0", "hiredis==3.5.0"]
GAP = 0.02  # seconds between pickup-latency jobs
SCHEDULE_START, SCHEDULE_SPAN = 0.5, 4.5
SIDEKIQ_SETTLE = 16.0  # Sidekiq 6.4's scheduled-job poller first runs 5-15 s after boot
STOP_TIMEOUT = 20.0


@dataclasses.dataclass
class System:
    name: str
    how: str  # the command line, shortened, for the report
    servers: list[list[str]]  # one command per root process
    producer: list[str]  # scripts/peers/drive.py (or sidekiq_drive.rb) and its module
    env: dict
    max_jobs: int | None = None  # a smaller throughput workload for a slow system (--slow-jobs)
    settle: float = 0.0  # seconds after boot before the schedule step


def ensure_venv(path: str) -> str:
    """The peers' virtualenv at ``path`` with PEER_PACKAGES; its bin directory."""
    py = os.path.join(path, "bin", "python")
    if not os.path.exists(py):
        print(f"creating {path} (python -m venv)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", path], check=True)
    pins = [p.replace("[redis]", "").split("==") for p in PEER_PACKAGES]
    check = ("import importlib.metadata as m, sys\n"
             f"sys.exit(any(m.version(n) != v for n, v in {pins!r}))")
    if subprocess.run([py, "-c", check], capture_output=True).returncode != 0:
        print(f"pip installing into {path}: {' '.join(PEER_PACKAGES)}", flush=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *PEER_PACKAGES], check=True)
    return os.path.dirname(py)


def make_systems(url: str, venv_bin: str, queued_cfg: str, args) -> list[System]:
    base = dict(os.environ, BENCH_REDIS_URL=url, REDIS_URL=url, PYTHONUNBUFFERED="1")
    py_env = dict(base, PYTHONPATH=PEERS_DIR)
    vpy = os.path.join(venv_bin, "python")
    drive = os.path.join(PEERS_DIR, "drive.py")

    def peer(name, how, servers, module, **kw):
        return System(name, how, servers, [vpy, drive, module], py_env, **kw)

    sidekiq = [shutil.which("sidekiq") or "sidekiq", "-r",
               os.path.join(PEERS_DIR, "sidekiq_jobs.rb"), "-c", "10", "-q", "default"]
    huey = [os.path.join(venv_bin, "huey_consumer"), "huey_jobs.huey", "-k", "process", "-w", "2",
            "-q"]
    dramatiq = [os.path.join(venv_bin, "dramatiq"), "dramatiq_jobs", "--path", PEERS_DIR, "-p", "2"]
    rq_worker = [os.path.join(venv_bin, "rq"), "worker", "-u", url, "--with-scheduler",
                 "--logging_level", "WARNING", "--path", PEERS_DIR, "default"]
    celery = [os.path.join(venv_bin, "celery"), "-A", "celery_jobs", "worker", "-P", "prefork",
              "-c", "2", "-l", "WARNING"]
    every = [
        System("queued", "queued -c 2 (master + 2 worker processes)",
               [[sys.executable, "-m", "queued", "-C", queued_cfg]],
               [sys.executable, drive, "queued_jobs"], dict(base, PYTHONPATH=ROOT)),
        System("sidekiq", "sidekiq -c 10 (one Ruby process, 10 threads)", [sidekiq],
               ["ruby", os.path.join(PEERS_DIR, "sidekiq_drive.rb")], base, settle=SIDEKIQ_SETTLE),
        peer("huey", "huey_consumer -k process -w 2", [huey], "huey_jobs"),
        peer("dramatiq", "dramatiq -p 2 -t 1", [dramatiq + ["-t", "1"]], "dramatiq_jobs",
             max_jobs=args.slow_jobs),
        peer("dramatiq-t8", "dramatiq -p 2 (default -t 8)", [dramatiq], "dramatiq_jobs"),
        peer("rq", "2 x rq worker --with-scheduler (fork per job)", [rq_worker, rq_worker],
             "rq_jobs", max_jobs=args.slow_jobs),
        peer("celery", "celery worker -P prefork -c 2", [celery], "celery_jobs"),
    ]
    wanted = {"all"} if args.peers == "all" else {"queued", *args.peers.split(",")}
    unknown = wanted - {"all"} - {s.name for s in every}
    if unknown:
        raise SystemExit(f"unknown system(s): {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(s.name for s in every)}")
    return [s for s in every if "all" in wanted or s.name in wanted]


def drive(system: System, *argv) -> dict:
    """Run the system's producer (scripts/peers/drive.py or sidekiq_drive.rb); its JSON."""
    proc = subprocess.run(system.producer + [str(a) for a in argv], capture_output=True,
                          text=True, env=system.env, cwd=PEERS_DIR, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{system.name} producer {argv} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def start(system: System) -> ProcessTree:
    return ProcessTree(system.servers, env=system.env, cwd=PEERS_DIR)


def wait_for(r, key, tree, timeout):
    """The float a job stamped in ``key``; fails fast if the system exits."""
    deadline = time.time() + timeout
    while (value := r.get(key)) is None:
        if not tree.alive():
            raise RuntimeError("the system exited")
        if time.time() > deadline:
            raise TimeoutError(f"no {key} after {timeout:.0f} s (bench:done={r.get('bench:done')})")
        time.sleep(0.005)
    return float(value)


def throughput_step(system: System, r, args) -> dict:
    r.flushall()
    one = drive(system, "fill", "one", args.enqueue_jobs, args.enqueue_jobs)["rate"]
    r.flushall()
    n = min(args.jobs, system.max_jobs or args.jobs)
    bulk = drive(system, "fill", "bulk", n, n)
    tree = start(system)
    try:
        last = wait_for(r, "bench:last", tree, timeout=60 + n / 20)
        first = float(r.get("bench:first"))
        time.sleep(1.0)
        pss_after = tree.pss_mib()
    finally:
        tree.stop(STOP_TIMEOUT)
    return {"jobs": n, "throughput": n / (last - first), "enqueue_one": one,
            "enqueue_bulk": bulk["rate"], "bulk_api": bulk["api"], "pss_after": pss_after,
            "killed": tree.killed}


def latency_step(system: System, r, args) -> dict:
    r.flushall()
    tree = start(system)
    booted = time.time()
    try:
        drive(system, "pickup", 5, 0.05)  # warm-up: the system is up and has run jobs
        if len(collect(r, 5, timeout=60)) < 5:
            raise RuntimeError("warm-up jobs did not run within 60 s")
        time.sleep(1.0)
        pss = tree.pss_mib()
        drive(system, "pickup", args.samples, GAP)
        pickup = collect(r, args.samples, timeout=10)
        time.sleep(max(0.0, booted + system.settle - time.time()))
        drive(system, "schedule", args.samples, SCHEDULE_START, SCHEDULE_SPAN)
        late = collect(r, args.samples, timeout=SCHEDULE_START + SCHEDULE_SPAN + 20)
    finally:
        tree.stop(STOP_TIMEOUT)
    return {"pss_idle": pss, "pickup": pickup, "late": late, "killed": tree.killed}


def versions(venv_bin: str, r) -> dict:
    out = {"redis-server": r.info("server")["redis_version"], "python": sys.version.split()[0],
           "queued": queued.__version__}
    rb = subprocess.run(["ruby", "-e", 'require "sidekiq"; print [Sidekiq::VERSION, RUBY_VERSION, '
                         'Redis::VERSION].join(" ")'], capture_output=True, text=True)
    if rb.returncode == 0:
        out["sidekiq"], out["ruby"], out["redis-rb"] = rb.stdout.split()
    names = [p.split("[")[0].split("==")[0] for p in PEER_PACKAGES]
    code = ("import importlib.metadata as m, json\n"
            f"print(json.dumps({{n: m.version(n) for n in {names!r}}}))")
    out.update(json.loads(subprocess.check_output([os.path.join(venv_bin, "python"), "-c", code])))
    return out


def summarize(systems, results, bare, pings, args) -> list[dict]:
    """One row per system: medians over the runs; latencies over all runs' samples pooled."""
    rows = []
    for s in systems:
        tp, lat = results[s.name]["tp"], results[s.name]["lat"]
        if not tp or not lat:
            print(f"{s.name}: no complete figures ({'; '.join(results[s.name]['failed'])})")
            continue
        pickup = [v for x in lat for v in x["pickup"]]
        late = [v for x in lat for v in x["late"]]
        rows.append({
            "name": s.name, "how": s.how, "jobs": tp[0]["jobs"],
            "throughput": statistics.median(x["throughput"] for x in tp),
            "runs": [round(x["throughput"]) for x in tp],
            "enqueue_one": statistics.median(x["enqueue_one"] for x in tp),
            "enqueue_bulk": statistics.median(x["enqueue_bulk"] for x in tp),
            "bulk_api": tp[0]["bulk_api"],
            "pickup_p50": pct(pickup, 50) if pickup else None,
            "pickup_p99": pct(pickup, 99) if pickup else None, "pickup_n": len(pickup),
            "late_p50": pct(late, 50) if late else None,
            "late_p99": pct(late, 99) if late else None, "late_n": len(late),
            "early": sum(v < 0 for v in late) / len(late) if late else 0.0,
            "pss_idle": statistics.median(x["pss_idle"] for x in lat),
            "pss_after": statistics.median(x["pss_after"] for x in tp),
            "killed": sum(x["killed"] for x in tp + lat),
            "failed": results[s.name]["failed"],
        })
    rows.append({"name": "bare BRPOP loop", "how": "2 processes: BRPOP, parse, INCR; "
                 "at-most-once, no scheduling, for scale; its one-by-one figure is bare PING "
                 "round trips on a raw socket, the ceiling for any producer that waits for "
                 "each push's reply", "jobs": args.jobs,
                 "throughput": statistics.median(bare), "runs": [round(x) for x in bare],
                 "enqueue_one": statistics.median(pings), "pings": [round(x) for x in pings]})
    return rows


def _ms(v):
    if v is None:
        return "-"
    return f"{v * 1000:,.0f} ms" if abs(v) >= 0.1 else f"{v * 1000:.2f} ms"


def _n(v):
    return "-" if v is None else f"{v:,.0f}"


def _mib(v):
    return "-" if v is None else f"{v:.1f} MiB"


def table(rows) -> str:
    """The side-by-side table, in Markdown (also readable as plain text)."""
    q = rows[0]["throughput"]  # queued comes first
    head = ("| system | throughput, jobs/s (median) | queued ÷ it | pickup p50 / p99 "
            "| schedule late p50 / p99 | enqueue 1-by-1, jobs/s | enqueue bulk, jobs/s "
            "| PSS idle | PSS after the run |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        g = r.get
        ratio = "" if r["name"] == "queued" else f"{q / r['throughput']:.2f}"
        jobs = "" if r["jobs"] == rows[0]["jobs"] else f" ({r['jobs']:,} jobs)"
        lines.append(
            f"| {r['name']} | {_n(r['throughput'])}{jobs} | {ratio} "
            f"| {_ms(g('pickup_p50'))} / {_ms(g('pickup_p99'))} "
            f"| {_ms(g('late_p50'))} / {_ms(g('late_p99'))} "
            f"| {_n(g('enqueue_one'))} | {_n(g('enqueue_bulk'))} "
            f"| {_mib(g('pss_idle'))} | {_mib(g('pss_after'))} |")
    return "\n".join(lines)


def notes(rows, args) -> str:
    out = []
    for row in rows:
        said = [f"throughput runs {', '.join(f'{x:,}' for x in row['runs'])}"]
        if "pings" in row:
            said.append(f"PING round trips/s by run {', '.join(f'{x:,}' for x in row['pings'])}")
        if "bulk_api" in row:
            said.append(f"bulk: {row['bulk_api']}")
            if row["early"]:
                said.append(f"{row['early']:.0%} of the scheduled jobs ran early")
            if min(row["pickup_n"], row["late_n"]) < args.samples * args.runs:
                said.append(f"latency samples that came back: pickup {row['pickup_n']}, "
                            f"schedule {row['late_n']} of {args.samples * args.runs}")
            if row["killed"]:
                said.append(f"{row['killed']} process(es) needed SIGKILL")
            if row["failed"]:
                said.append(f"failed steps (left out): {'; '.join(row['failed'])}")
        out.append(f"- {row['name']} ({row['how']}): " + "; ".join(said))
    return "\n".join(out)


def attempt(step, system, r, args, results, kind, run_no):
    """One step; a failure is reported and counted, and the run goes on with the others."""
    try:
        x = step(system, r, args)
    except Exception as e:  # noqa: BLE001 - one peer's trouble must not lose the whole run
        print(f"run {run_no + 1} {system.name:12s} FAILED {step.__name__}: {e}", flush=True)
        results[system.name]["failed"].append(f"run {run_no + 1} {step.__name__}: {e}")
        return None
    results[system.name][kind].append(x)
    return x


def run(args) -> None:
    t_start = time.time()
    venv_bin = ensure_venv(os.path.abspath(args.venv))
    server = RedisServer(args.redis_server)
    cfg = write_queued_config(server.url, 2, {"job_logging": False})
    r = redis.Redis.from_url(server.url)
    queued.configure(url=server.url)  # the bare loop's jobs are pushed from this process
    try:
        systems = make_systems(server.url, venv_bin, cfg, args)
        vers = versions(venv_bin, r)
        print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()), flush=True)
        results = {s.name: {"tp": [], "lat": [], "failed": []} for s in systems}
        bare, pings = [], []
        for run_no in range(args.runs):
            order = systems[run_no % len(systems):] + systems[:run_no % len(systems)]
            for s in order:
                t0 = time.time()
                x = attempt(throughput_step, s, r, args, results, "tp", run_no)
                if x:
                    print(f"run {run_no + 1} {s.name:12s} {x['throughput']:8,.0f} jobs/s  enqueue"
                          f" {x['enqueue_one']:7,.0f}/s one by one, {x['enqueue_bulk']:8,.0f}/s "
                          f"bulk  ({time.time() - t0:.0f} s)", flush=True)
            bare.append(baseline(server.url, args.jobs, 2))
            pings.append(bare_round_trips(server.url, args.enqueue_jobs))
            print(f"run {run_no + 1} bare BRPOP loop {bare[-1]:8,.0f} jobs/s; bare PING round "
                  f"trips {pings[-1]:7,.0f}/s one by one", flush=True)
            for s in order:
                t0 = time.time()
                x = attempt(latency_step, s, r, args, results, "lat", run_no)
                if x:
                    print(f"run {run_no + 1} {s.name:12s} pickup p50 {_ms(pct(x['pickup'], 50))},"
                          f" schedule late p99 {_ms(pct(x['late'], 99))} (n={len(x['late'])}), "
                          f"idle {x['pss_idle']:.1f} MiB  ({time.time() - t0:.0f} s)", flush=True)
    finally:
        os.unlink(cfg)
        server.stop()
    rows = summarize(systems, results, bare, pings, args)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    os.makedirs(os.path.join(ROOT, "var"), exist_ok=True)
    out = os.path.join(ROOT, "var", f"bench-peers-{stamp}.json")
    with open(out, "w") as f:
        json.dump({"args": vars(args), "versions": vers, "rows": rows, "raw": results,
                   "bare": bare, "pings": pings}, f, indent=1)
    print(f"\n{args.jobs:,} jobs x {args.runs} runs, {args.samples} latency samples per system "
          f"and run, {time.time() - t_start:.0f} s in all; raw figures in "
          f"{os.path.relpath(out, ROOT)}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()) + "\n")
    print(table(rows) + "\n")
    print(notes(rows, args))
