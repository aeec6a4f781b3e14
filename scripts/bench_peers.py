"""queued beside its peers, on one Redis, with one workload, interleaved: ``scripts/bench --peers``;
and the sweep over each system's configurations that picks the one it runs with: ``scripts/bench
--sweep GROUP``.

Each system runs at its best on this 2-core machine, as its users would tune it for many short
jobs (scripts/bench_configs.py: every configuration tried, and CHOSEN); the table's rows:

    queued      queued -c 4 (master + 4 worker processes), job_logging false: its best
    queued-c2   queued -c 2: one worker per core, for comparison
    sidekiq     sidekiq -c 10: one Ruby process, redis-rb's hiredis driver (Debian's
                ruby-hiredis), YJIT on (RUBY_YJIT_ENABLE=1, --yjit-exec-mem-size=16),
                logger at WARN
    sidekiq-x2  two sidekiq -c 5 processes, the same: one process per core
    huey        huey_consumer -k process -w 4 -q
    dramatiq    dramatiq -p 4 -t 8 with dramatiq_queue_prefetch=64
    dramatiq-defaults  dramatiq -p 2 -t 8: its defaults, which pick up sooner
    rq          two rq worker -w rq.worker.SimpleWorker --with-scheduler (no fork per job)
    celery      two celery worker -P solo --without-gossip --without-mingle --without-heartbeat
                -l WARNING processes

Every one has its per-job log lines off. The Python peers live in their own virtualenv
(var/bench-venv by default, made and filled with PEER_PACKAGES on first use), never in queued's
dependencies; their job modules and the producer drivers are in scripts/peers/. Sidekiq's
hiredis driver is Debian's ruby-hiredis, installed with apt-get on first use when missing.

Each of ``--runs`` rounds goes over every system in turn (the order rotates from round to
round) so machine noise hits all alike, and each step starts from FLUSHALL:

1. enqueue rate one by one: ``--enqueue-jobs`` jobs through the system's own producer API;
2. enqueue rate in bulk: ``--jobs`` jobs through its bulk API (or its many-jobs API where it
   has no bulk write), batches of 1,000; these jobs are the throughput workload;
3. throughput: start the system; jobs/s after the warm-up = the jobs after the first tenth /
   (finish of the last job - finish of the job that ends the first tenth). The first tenth lets
   each system reach its steady state (connections made, code warm, Ruby's JIT compiled);
   ``from_first`` in the raw figures is SIDEKIQ_FORMAT.md section 9's jobs / (last - first).
   Then PSS of its process tree 1 s after the last job; stop;

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
scripts/peers/sidekiq_jobs.rb). A system is stopped by PID after each step: SIGTERM, then
SIGKILL for whatever of its tree is left after 20 s. Each step's line shows the host's 1-minute
load average when it started (2 cores: above 2 means other work queued for the CPUs).
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import redis

import queued
from bench_configs import CHOSEN, PEERS_DIR, Catalogue, System, select
from benchlib import (ROOT, ProcessTree, RedisServer, bare_round_trips, baseline, collect, pct,
                      rates, redis_cpu)

#: What the peers' virtualenv holds. Pinned so that a rerun measures the same code; hiredis
#: because queued has it (redis-py picks it up by itself).
PEER_PACKAGES = ["huey==3.5.4", "dramatiq[redis]==2.2.1", "rq==2.12.0", "celery[redis]==5.7.0",
                 "redis==8.1.0", "hiredis==3.5.0"]
GAP = 0.02  # seconds between pickup-latency jobs
SCHEDULE_START, SCHEDULE_SPAN = 0.5, 4.5
STOP_TIMEOUT = 20.0


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


def ensure_ruby_hiredis(systems: list[System]) -> None:
    """redis-rb's C driver for the Sidekiq configurations that use it: Debian's ruby-hiredis,
    installed with apt-get when missing (as root), as the peers' venv is made on first use."""
    if not any(s.env.get("BENCH_SIDEKIQ_DRIVER") == "hiredis" for s in systems):
        return
    probe = ["ruby", "-e", 'require "hiredis/connection"']
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return
    if os.geteuid() != 0:
        raise SystemExit("Sidekiq runs with redis-rb's hiredis driver: "
                         "apt-get install ruby-hiredis")
    print("apt-get installing ruby-hiredis (redis-rb's C driver, for Sidekiq)", flush=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "ruby-hiredis"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(probe, check=True)


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


def workload(system: System, r, n: int) -> dict:
    """``n`` jobs filled in bulk, then run by a freshly started system: jobs/s after the
    warm-up (the first tenth; see the module docstring) and from the first job on."""
    r.flushall()
    bulk = drive(system, "fill", "bulk", n, n)
    load = os.getloadavg()[0]
    cpu0 = redis_cpu(r)
    tree = start(system)
    try:
        wait_for(r, "bench:last", tree, timeout=60 + n / 20)
        redis_us = (redis_cpu(r) - cpu0) / n * 1e6  # its boot included, as queued's
        time.sleep(1.0)
        pss_after = tree.pss_mib()
    finally:
        tree.stop(STOP_TIMEOUT)
    after_warm, from_first = rates(r, n)
    return {"jobs": n, "throughput": after_warm, "from_first": from_first,
            "enqueue_bulk": bulk["rate"], "bulk_api": bulk["api"], "pss_after": pss_after,
            "redis_cpu_us": redis_us,
            "load": load, "killed": tree.killed}


def throughput_step(system: System, r, args) -> dict:
    r.flushall()
    one = drive(system, "fill", "one", args.enqueue_jobs, args.enqueue_jobs)["rate"]
    return {"enqueue_one": one, **workload(system, r, min(args.jobs, system.max_jobs or args.jobs))}


def sweep_step(system: System, r, args) -> dict:
    return workload(system, r, min(args.jobs, system.max_jobs or args.jobs))


def latency_step(system: System, r, args) -> dict:
    r.flushall()
    load = os.getloadavg()[0]
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
    return {"pss_idle": pss, "pickup": pickup, "late": late, "load": load, "killed": tree.killed}


def versions(venv_bin: str, r) -> dict:
    out = {"redis-server": r.info("server")["redis_version"], "python": sys.version.split()[0],
           "queued": queued.__version__}
    rb = subprocess.run(["ruby", "-e", 'require "sidekiq"; v = [Sidekiq::VERSION, RUBY_VERSION, '
                         'Redis::VERSION]; begin; require "hiredis/version"; v << Hiredis::VERSION;'
                         ' rescue LoadError; v << "-"; end; print v.join(" ")'],
                        capture_output=True, text=True)
    if rb.returncode == 0:
        out["sidekiq"], out["ruby"], out["redis-rb"], out["hiredis-rb"] = rb.stdout.split()
    names = [p.split("[")[0].split("==")[0] for p in PEER_PACKAGES]
    code = ("import importlib.metadata as m, json\n"
            f"print(json.dumps({{n: m.version(n) for n in {names!r}}}))")
    out.update(json.loads(subprocess.check_output([os.path.join(venv_bin, "python"), "-c", code])))
    return out


def _row_name(s: System) -> str:
    return s.label or s.name


def summarize(systems, results, bare, pings, args) -> list[dict]:
    """One row per system: medians over the runs; latencies over all runs' samples pooled."""
    rows = []
    for s in systems:
        res = results[_row_name(s)]
        tp, lat = res["tp"], res["lat"]
        if not tp or not lat:
            print(f"{_row_name(s)}: no complete figures ({'; '.join(res['failed'])})")
            continue
        pickup = [v for x in lat for v in x["pickup"]]
        late = [v for x in lat for v in x["late"]]
        rows.append({
            "name": _row_name(s), "config": s.name, "how": s.how, "jobs": tp[0]["jobs"],
            "throughput": statistics.median(x["throughput"] for x in tp),
            "runs": [round(x["throughput"]) for x in tp],
            "from_first": statistics.median(x["from_first"] for x in tp),
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
            "failed": res["failed"],
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


def _ratio(q, row):
    return "" if q is None or row["name"].startswith("queued") else f"{q / row['throughput']:.2f}"


def table(rows) -> str:
    """The side-by-side table, in Markdown (also readable as plain text). The ratios are the
    queued row's median jobs/s (its best) and queued-c2's over the system's."""
    by = {r["name"]: r["throughput"] for r in rows}
    best, two = by.get("queued"), by.get("queued-c2")
    head = ("| system | throughput, jobs/s (median) | queued ÷ it | queued -c 2 ÷ it "
            "| pickup p50 / p99 | schedule late p50 / p99 | enqueue 1-by-1, jobs/s "
            "| enqueue bulk, jobs/s | PSS idle | PSS after the run |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        g = r.get
        jobs = "" if r["jobs"] == rows[0]["jobs"] else f" ({r['jobs']:,} jobs)"
        lines.append(
            f"| {r['name']} | {_n(r['throughput'])}{jobs} | {_ratio(best, r)} | {_ratio(two, r)} "
            f"| {_ms(g('pickup_p50'))} / {_ms(g('pickup_p99'))} "
            f"| {_ms(g('late_p50'))} / {_ms(g('late_p99'))} "
            f"| {_n(g('enqueue_one'))} | {_n(g('enqueue_bulk'))} "
            f"| {_mib(g('pss_idle'))} | {_mib(g('pss_after'))} |")
    return "\n".join(lines)


def notes(rows, args) -> str:
    out = []
    for row in rows:
        said = [f"throughput runs {', '.join(f'{x:,}' for x in row['runs'])}"]
        if "from_first" in row:
            said.append(f"from the first job {row['from_first']:,.0f} jobs/s (median)")
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
    name = _row_name(system)
    try:
        x = step(system, r, args)
    except Exception as e:  # noqa: BLE001 - one peer's trouble must not lose the whole run
        print(f"run {run_no + 1} {name:12s} FAILED {step.__name__}: {e}", flush=True)
        results[name]["failed"].append(f"run {run_no + 1} {step.__name__}: {e}")
        return None
    results[name][kind].append(x)
    return x


def rotated(items, run_no):
    k = run_no % len(items)
    return items[k:] + items[:k]


def table_systems(catalogue: Catalogue, spec: str) -> list[System]:
    """The table's rows: queued at its best and with 2 workers, then the peers asked for."""
    wanted = list(CHOSEN) if spec == "all" else ["queued", "queued-c2", *spec.split(",")]
    return select(catalogue.all(), ",".join(dict.fromkeys(wanted)))


def save(kind: str, payload: dict, indent: int | None = 1) -> str:
    """``payload`` in var/bench-<kind>-<date>.json (one line if ``indent`` is None)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    os.makedirs(os.path.join(ROOT, "var"), exist_ok=True)
    out = os.path.join(ROOT, "var", f"bench-{kind}-{stamp}.json")
    with open(out, "w") as f:
        json.dump(payload, f, indent=indent)
        f.write("\n")
    return os.path.relpath(out, ROOT)


def run(args) -> None:
    """``scripts/bench --peers``: the side-by-side table."""
    t_start = time.time()
    venv_bin = ensure_venv(os.path.abspath(args.venv))
    server = RedisServer(args.redis_server)
    catalogue = Catalogue(server.url, venv_bin, args)
    r = redis.Redis.from_url(server.url)
    queued.configure(url=server.url)  # the bare loop's jobs are pushed from this process
    try:
        systems = table_systems(catalogue, args.peers)
        ensure_ruby_hiredis(systems)
        vers = versions(venv_bin, r)
        print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()), flush=True)
        for s in systems:
            print(f"  {_row_name(s):11s} {s.how}", flush=True)
        results = {_row_name(s): {"tp": [], "lat": [], "failed": []} for s in systems}
        bare, pings = [], []
        for run_no in range(args.runs):
            order = rotated(systems, run_no)
            for s in order:
                t0 = time.time()
                x = attempt(throughput_step, s, r, args, results, "tp", run_no)
                if x:
                    print(f"run {run_no + 1} {_row_name(s):12s} {x['throughput']:8,.0f} jobs/s "
                          f"enqueue {x['enqueue_one']:7,.0f}/s one by one, "
                          f"{x['enqueue_bulk']:8,.0f}/s bulk  (load {x['load']:.1f}, "
                          f"{time.time() - t0:.0f} s)", flush=True)
            bare.append(baseline(server.url, args.jobs, 2))
            pings.append(bare_round_trips(server.url, args.enqueue_jobs))
            print(f"run {run_no + 1} bare BRPOP loop {bare[-1]:8,.0f} jobs/s; bare PING round "
                  f"trips {pings[-1]:7,.0f}/s one by one", flush=True)
            for s in order:
                t0 = time.time()
                x = attempt(latency_step, s, r, args, results, "lat", run_no)
                if x:
                    print(f"run {run_no + 1} {_row_name(s):12s} pickup p50 "
                          f"{_ms(pct(x['pickup'], 50))}, schedule late p99 "
                          f"{_ms(pct(x['late'], 99))} (n={len(x['late'])}), idle "
                          f"{x['pss_idle']:.1f} MiB  (load {x['load']:.1f}, "
                          f"{time.time() - t0:.0f} s)", flush=True)
    finally:
        catalogue.close()
        server.stop()
    rows = summarize(systems, results, bare, pings, args)
    out = save("peers", {"args": vars(args), "versions": vers, "rows": rows, "raw": results,
                         "bare": bare, "pings": pings})
    print(f"\n{args.jobs:,} jobs x {args.runs} runs, {args.samples} latency samples per system "
          f"and run, {time.time() - t_start:.0f} s in all; raw figures in {out}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()) + "\n")
    print(table(rows) + "\n")
    print(notes(rows, args))


def sweep(args) -> None:
    """``scripts/bench --sweep SPEC``: the throughput step alone for every configuration SPEC
    names (bench_configs.select), round-robin, to find each system's best."""
    t_start = time.time()
    venv_bin = ensure_venv(os.path.abspath(args.venv))
    server = RedisServer(args.redis_server)
    catalogue = Catalogue(server.url, venv_bin, args)
    r = redis.Redis.from_url(server.url)
    try:
        systems = select(catalogue.all(), args.sweep, rows=False)
        ensure_ruby_hiredis(systems)
        vers = versions(venv_bin, r)
        results = {s.name: {"tp": [], "failed": []} for s in systems}
        for run_no in range(args.runs):
            for s in rotated(systems, run_no):
                x = attempt(sweep_step, s, r, args, results, "tp", run_no)
                if x:
                    print(f"run {run_no + 1} {s.name:28s} {x['throughput']:8,.0f} jobs/s "
                          f"(from the first {x['from_first']:7,.0f})  load {x['load']:.1f}",
                          flush=True)
    finally:
        catalogue.close()
        server.stop()
    out = save("sweep", {"args": vars(args), "versions": vers, "raw": results,
                         "how": {s.name: s.how for s in systems}})
    print(f"\n{args.runs} runs, {time.time() - t_start:.0f} s; raw figures in {out}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()) + "\n")
    print(sweep_table(systems, results))


def sweep_table(systems, results) -> str:
    lines = ["| configuration | jobs | jobs/s after warm-up (median) | runs | from the first job "
             "(median) |", "|---|---|---|---|---|"]
    for s in systems:
        tp = results[s.name]["tp"]
        if not tp:
            lines.append(f"| {s.how} | | failed: {'; '.join(results[s.name]['failed'])} | | |")
            continue
        lines.append(f"| {s.how} | {tp[0]['jobs']:,} "
                     f"| {statistics.median(x['throughput'] for x in tp):,.0f} "
                     f"| {', '.join(format(x['throughput'], ',.0f') for x in tp)} "
                     f"| {statistics.median(x['from_first'] for x in tp):,.0f} |")
    return "\n".join(lines)
