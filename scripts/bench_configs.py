"""Every configuration of queued and its peers that the benchmark can run, the ones the
side-by-side table uses (CHOSEN), and the sweep that chose them:

    scripts/bench --sweep sidekiq            # every Sidekiq configuration, throughput only
    scripts/bench --sweep queued,huey --runs 5
    scripts/bench --sweep sidekiq-x2,sidekiq-hiredis-c10 --jobs 5000

A peer is compared at its best or not at all: a benchmark that understates a peer is worse than
none. So each system runs the way its users would tune it for many short jobs on this 2-core
machine (concurrency, processes against threads, the Redis driver, logging off), and CHOSEN
names, per system, the configuration with the best median in the sweeps (or one level with it
and leaner). A sweep runs the
throughput step of scripts/bench_peers.py (bulk-filled queue, jobs/s after the warm-up) for
every configuration of the named groups, round-robin over ``--runs`` rounds.

What each gave (2026-11-23; jobs/s after the warm-up, medians of 5 runs, several sweeps where
they disagreed; all runs and more configurations in docs/benchmarks.md, "How each system was
tuned"):

    queued     -c 2: 8,189 / 9,944; -c 3: 9,484; -c 4: 10,873 / 12,111 (chosen); -c 6: 10,376
    sidekiq    one process -c 10, pure-Ruby driver (the first harness): 4,438 / 5,086;
               hiredis driver -c 5: 6,347, -c 10: 6,725 / 5,905 / 6,932 / 6,866, -c 25:
               6,487; -c 10 hiredis + YJIT: 6,717 / 7,262 / 7,581 / 7,742, + YJIT in 16 MiB:
               8,035 (chosen); + jemalloc: no change. Two processes -c 5 hiredis: 8,031 /
               10,211 / 10,346 / 9,461; + YJIT: 10,869 / 10,832 / 10,766 / 10,946, + YJIT in
               16 MiB: 10,335 (chosen: as fast, and Ruby 3.1 touches all of its default 256
               MiB of JIT code memory: 283 MiB PSS for one idle process)
    huey       -k process -w 2: 3,099, -w 4: 3,570 (chosen), -w 8: 3,064; -k thread -w 4/8/16:
               2,451 / 2,572 / 2,211
    dramatiq   -p 2 -t 1/2/4/8/16: 489 / 951 / 1,800 / 2,836 / 2,876; -p 4 -t 8: 3,170;
               prefetch 64: -p 2 -t 8: 3,615 / 5,976, -p 4 -t 8: 6,955 / 5,181 / 5,821
               (chosen), -p 4 -t 16: 5,942 / 5,700, -p 4 -t 4: 5,618, -p 3 / -p 6 -t 8:
               5,191 / 4,981; -p 2 -t 8 prefetch 256: 5,110
    rq         2 x Worker (a fork per job): 66; 2 x SimpleWorker: 395 (chosen); 4 x: 380
    celery     prefork -c 2: 604, -c 4: 616, -c 2 tuned (prefetch x64, no gossip/mingle/
               heartbeat): 713 / 565; threads -c 8: 661; 2 x solo: 1,208 / 1,263 (chosen);
               2 x solo prefetch x64: 997; 4 x solo: 798

Not tried: gevent/eventlet pools (they are for jobs that wait on I/O), `rq worker-pool` (the
same SimpleWorkers under one parent, with no scheduler option).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys

from benchlib import HERE, ROOT, write_queued_config

PEERS_DIR = os.path.join(HERE, "peers")
SIDEKIQ_SETTLE = 16.0  # Sidekiq 6.4's scheduled-job poller first runs 5-15 s after boot
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

#: The side-by-side table's rows: a label and the configuration it runs, the best median of
#: its system in the sweeps (figures in docs/benchmarks.md, "How each system was tuned").
CHOSEN = {
    # Workers wait on Redis round trips, so more of them than cores: -c 4 beat -c 2, 3 and 6.
    "queued": "queued-c4",
    "queued-c2": "queued-c2",  # one worker per core: the default on this machine
    # One process (the GVL holds it to about one core): the C driver, and YJIT in 16 MiB of
    # code memory (as fast as the default 256 MiB here, which Ruby 3.1 touches all of).
    "sidekiq": "sidekiq-hiredis-c10-yjit16",
    # One process per core, as Sidekiq Enterprise's sidekiqswarm starts by default.
    "sidekiq-x2": "sidekiq-x2-hiredis-c5-yjit16",
    "huey": "huey-process-w4",
    # A bigger prefetch spares its Redis consumer the sleeps between small fetches.
    "dramatiq": "dramatiq-p4-t8-prefetch64",
    # Its defaults too, to show that the tuning leaves its latency alone: both poll Redis
    # with a backoff (pickup p50 9.4 and 9.8 ms in the first run with both).
    "dramatiq-defaults": "dramatiq-p2-t8",
    "rq": "rq-simple-x2",  # SimpleWorker runs jobs in the worker: no fork per job
    # Two single-process workers: no hand-off to a pool child over a pipe.
    "celery": "celery-solo-x2",
}


@dataclasses.dataclass
class System:
    name: str
    group: str  # what it is a configuration of: queued, sidekiq, huey, dramatiq, rq, celery
    how: str  # the command line, shortened, for the report
    servers: list[list[str]]  # one command per root process
    producer: list[str]  # scripts/peers/drive.py (or sidekiq_drive.rb) and its module
    env: dict
    max_jobs: int | None = None  # a smaller throughput workload for a slow system (--slow-jobs)
    settle: float = 0.0  # seconds after boot before the schedule step
    label: str = ""  # its row in the side-by-side table, if it has one


class Catalogue:
    """Builds the configurations against one Redis; owns the queued config files it writes."""

    def __init__(self, url: str, venv_bin: str, args):
        self.url, self.venv_bin, self.args = url, venv_bin, args
        self.base = dict(os.environ, BENCH_REDIS_URL=url, REDIS_URL=url, PYTHONUNBUFFERED="1")
        self.files: list[str] = []

    def close(self) -> None:
        for f in self.files:
            os.unlink(f)

    def all(self) -> dict[str, System]:
        systems = (self.queued() + self.sidekiq() + self.huey() + self.dramatiq() + self.rq()
                   + self.celery())
        return {s.name: s for s in systems}

    def _peer(self, name, group, how, servers, module, **kw) -> System:
        py = os.path.join(self.venv_bin, "python")
        return System(name, group, how, servers, [py, os.path.join(PEERS_DIR, "drive.py"), module],
                      dict(self.base, PYTHONPATH=PEERS_DIR), **kw)

    def _bin(self, name: str) -> str:
        return os.path.join(self.venv_bin, name)

    def queued(self) -> list[System]:
        out = []
        for n in (2, 3, 4, 6):
            cfg = write_queued_config(self.url, n, {"job_logging": False})
            self.files.append(cfg)
            out.append(System(f"queued-c{n}", "queued", f"queued -c {n} (master + {n} worker "
                              "processes), job_logging false", [[sys.executable, "-m", "queued",
                                                                 "-C", cfg]],
                              [sys.executable, os.path.join(PEERS_DIR, "drive.py"), "queued_jobs"],
                              dict(self.base, PYTHONPATH=ROOT)))
        return out

    def sidekiq(self) -> list[System]:
        """One process (-c 5/10/25, each driver; YJIT, jemalloc) and one per core (x2)."""
        tried = [(1, "ruby", 10, ()), (1, "ruby", 10, ("warnings",)), (1, "hiredis", 5, ()),
                 (1, "hiredis", 10, ()), (1, "hiredis", 25, ()), (1, "hiredis", 10, ("yjit",)),
                 (1, "hiredis", 10, ("jemalloc",)), (1, "hiredis", 10, ("yjit", "jemalloc")),
                 (2, "hiredis", 5, ()), (2, "hiredis", 10, ()), (2, "hiredis", 5, ("yjit",)),
                 (2, "hiredis", 10, ("yjit",)), (2, "hiredis", 5, ("yjit", "jemalloc")),
                 (1, "hiredis", 10, ("yjit16",)), (2, "hiredis", 5, ("yjit16",)),
                 (1, "hiredis", 10, ("yjit16", "jemalloc")),
                 (2, "hiredis", 5, ("yjit16", "jemalloc"))]
        return [self._sidekiq(*t) for t in tried]

    def _sidekiq(self, procs: int, driver: str, threads: int, extras: tuple) -> System:
        env = dict(self.base, BENCH_SIDEKIQ_DRIVER=driver)
        if "yjit" in extras:  # Ruby's JIT (3.1: --yjit); Sidekiq's own README quotes it
            env["RUBY_YJIT_ENABLE"] = "1"
        if "yjit16" in extras:  # the same, in 16 MiB of code memory: 3.1 touches all it
            env.update(RUBY_YJIT_ENABLE="1", RUBYOPT="--yjit-exec-mem-size=16")  # (256 MiB)
        if "jemalloc" in extras:  # the allocator Sidekiq's wiki advises against fragmentation
            env["LD_PRELOAD"] = JEMALLOC
        if "warnings" in extras:  # redis-rb's deprecation line per fetch, as Debian ships it
            env["BENCH_SIDEKIQ_WARNINGS"] = "1"
        cmd = [shutil.which("sidekiq") or "sidekiq", "-r",
               os.path.join(PEERS_DIR, "sidekiq_jobs.rb"), "-c", str(threads), "-q", "default"]
        name = f"sidekiq{'-x2' if procs == 2 else ''}-{driver}-c{threads}" + "".join(
            f"-{e}" for e in extras)
        how = (f"{'2 x ' if procs == 2 else ''}sidekiq -c {threads} ({procs} Ruby process"
               f"{'es' if procs > 1 else ''}), redis-rb {driver} driver"
               + "".join(f", {e}" for e in extras))
        return System(name, "sidekiq", how, [cmd] * procs,
                      ["ruby", os.path.join(PEERS_DIR, "sidekiq_drive.rb")], env,
                      settle=SIDEKIQ_SETTLE)

    def huey(self) -> list[System]:
        out = []
        for kind, workers in (("process", 2), ("process", 4), ("process", 8), ("thread", 4),
                              ("thread", 8), ("thread", 16)):
            cmd = [self._bin("huey_consumer"), "huey_jobs.huey", "-k", kind, "-w", str(workers),
                   "-q"]
            out.append(self._peer(f"huey-{kind}-w{workers}", "huey",
                                  f"huey_consumer -k {kind} -w {workers} -q", [cmd], "huey_jobs"))
        return out

    def dramatiq(self) -> list[System]:
        out = []
        for procs, threads, prefetch in ((2, 1, 0), (2, 2, 0), (2, 4, 0), (2, 8, 0), (2, 16, 0),
                                         (4, 8, 0), (2, 8, 64), (2, 8, 256), (2, 16, 64),
                                         (3, 8, 64), (4, 4, 64), (4, 8, 64), (4, 16, 64),
                                         (6, 8, 64)):
            cmd = [self._bin("dramatiq"), "dramatiq_jobs", "--path", PEERS_DIR, "-p", str(procs),
                   "-t", str(threads)]
            name = f"dramatiq-p{procs}-t{threads}" + (f"-prefetch{prefetch}" if prefetch else "")
            sys_ = self._peer(name, "dramatiq", f"dramatiq -p {procs} -t {threads}"
                              + (f", dramatiq_queue_prefetch={prefetch}" if prefetch else ""),
                              [cmd], "dramatiq_jobs",
                              max_jobs=self.args.slow_jobs if threads == 1 else None)
            if prefetch:
                sys_.env["dramatiq_queue_prefetch"] = str(prefetch)
            out.append(sys_)
        return out

    def rq(self) -> list[System]:
        def worker(cls):
            return [self._bin("rq"), "worker", "-u", self.url, "--with-scheduler", "-w", cls,
                    "--logging_level", "WARNING", "--path", PEERS_DIR, "default"]
        fork, simple = worker("rq.worker.Worker"), worker("rq.worker.SimpleWorker")
        return [
            self._peer("rq-fork-x2", "rq", "2 x rq worker --with-scheduler (forks a work horse "
                       "per job)", [fork] * 2, "rq_jobs", max_jobs=self.args.slow_jobs),
            self._peer("rq-simple-x2", "rq", "2 x rq worker -w rq.worker.SimpleWorker "
                       "--with-scheduler (no fork)", [simple] * 2, "rq_jobs",
                       max_jobs=self.args.slow_jobs),
            self._peer("rq-simple-x4", "rq", "4 x rq worker -w rq.worker.SimpleWorker "
                       "--with-scheduler (no fork)", [simple] * 4, "rq_jobs",
                       max_jobs=self.args.slow_jobs),
        ]

    def celery(self) -> list[System]:
        base = [self._bin("celery"), "-A", "celery_jobs", "worker", "-l", "WARNING"]
        quiet = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        tried = [("prefork-c2", ["-P", "prefork", "-c", "2"], 1),
                 ("prefork-c4", ["-P", "prefork", "-c", "4"], 1),
                 ("prefork-c2-tuned", ["-P", "prefork", "-c", "2", "--prefetch-multiplier", "64",
                                       *quiet], 1),
                 ("threads-c8", ["-P", "threads", "-c", "8"], 1),
                 ("solo-x2", ["-P", "solo", *quiet], 2),
                 ("solo-x2-prefetch64", ["-P", "solo", "--prefetch-multiplier", "64", *quiet], 2),
                 ("solo-x4", ["-P", "solo", *quiet], 4)]
        # Several workers on one host need a node name each.
        return [self._peer(f"celery-{name}", "celery", f"{procs} x " * (procs > 1)
                           + "celery worker " + " ".join(opts),
                           [base + opts + ["-n", f"bench{i}@%h"] for i in range(procs)],
                           "celery_jobs") for name, opts, procs in tried]


def select(systems: dict[str, System], spec: str, rows: bool = True) -> list[System]:
    """``spec``: comma list of table rows (CHOSEN; only if ``rows``), configuration names, or
    a group or a name prefix (``sidekiq-x2`` is every two-process Sidekiq configuration)."""
    out: list[System] = []
    for item in spec.split(","):
        if rows and item in CHOSEN:
            found = [dataclasses.replace(systems[CHOSEN[item]], label=item)]
        elif item in systems:
            found = [systems[item]]
        else:
            found = [s for s in systems.values()
                     if s.name == item or s.group == item or s.name.startswith(item + "-")]
        if not found:
            raise SystemExit(f"unknown system {item!r}; table rows: {', '.join(CHOSEN)}; "
                             f"configurations: {', '.join(systems)}")
        out += [s for s in found if s not in out]
    return out
