"""Redis goes away under a running daemon: restarted (with persistence), frozen (SIGSTOP),
or not there yet when the daemon boots. The daemon waits, logs the outage once, carries on,
and loses nothing."""
import time
from contextlib import contextmanager

import queued
from faults import faultjobs
from faults.common import (JOBS, OwnRedis, Tally, all_workers, client, done_count,
                           first_progress, held, log_lines, queued_jobs, report)

from harness import Daemon, wait_for

JOBS_IN = 1500


def push(url, n):
    return queued.Client(url=url).push_bulk(
        {"class": faultjobs.Tick, "args": [[i, i % 5] for i in range(n)]})


def check_outage_logged_once(out, workers):
    master = log_lines(out, "Redis unreachable", "master")
    assert len(master) == 1, master
    assert len(log_lines(out, "Redis is back", "master")) == 1
    for w in range(workers):
        assert len(log_lines(out, "Redis unreachable", f"w{w}")) <= 1
    assert "crashed" not in out and "Traceback" not in out
    assert "silent for" not in out


@contextmanager
def mid_run(tmp_path, server, concurrency):
    """A daemon with ``concurrency`` workers a third of the way through JOBS_IN jobs on its
    own ``server``; both are stopped afterwards. Yields (server, daemon, client, jids,
    worker pids)."""
    server.start()
    d = Daemon(server.url, tmp_path, require=JOBS, concurrency=concurrency)
    try:
        c = client(server.url)
        jids = push(server.url, JOBS_IN)
        d.start()
        workers = all_workers(d, concurrency)
        wait_for(lambda: done_count(c) >= JOBS_IN // 3, 60, what="a third of the jobs")
        yield server, d, c, jids, workers
    finally:
        d.cleanup()
        server.stop()


def carries_on_without_loss(c, jids, since: float):
    """After an outage: every job runs to the end, none twice, nothing left held or queued.
    Returns (seconds to the first finished job, seconds to the last, the tally)."""
    resumed = first_progress(c)
    wait_for(lambda: done_count(c) == JOBS_IN, 90, interval=0.05, what="every job to run")
    finished = time.monotonic() - since
    tally = Tally(c, jids)
    assert tally.lost == set()
    assert tally.twice == set()  # an outage is no reason to run a job again
    wait_for(lambda: held(c) == 0, 10, what="no job held")
    assert queued_jobs(c) == 0 and c.zcard("retry") == 0 and c.zcard("dead") == 0
    return resumed, finished, tally


def test_redis_restarted_mid_run_loses_nothing(tmp_path):
    # Given a daemon (3 workers) working through 1500 jobs on a Redis that persists every
    # write (appendonly, appendfsync always)
    with mid_run(tmp_path, OwnRedis(), 3) as (server, d, c, jids, workers):
        # When Redis is shut down (SIGTERM: it writes its data), and started again on the
        # same port and directory a second later
        server.shutdown()
        down = time.monotonic()
        d.wait_log("Redis unreachable", 10)
        time.sleep(max(0.0, down + 1.0 - time.monotonic()))  # the outage lasts 1 s, by design
        server.start()
        up = time.monotonic()
        # Then the daemon carries on: every job runs to the end exactly once
        resumed, finished, tally = carries_on_without_loss(c, jids, up)
        # And it logged the outage once per process, kept its workers, and stops cleanly
        d.wait_log("Redis is back", 10)
        check_outage_logged_once(d.output(), 3)
        assert set(d.worker_pids()) == workers
        assert d.stop() == 0
        report("Redis shut down (SIGTERM, AOF fsync always) mid-run and started again 1 s "
               "later on the same port and data; 3 workers", JOBS_IN, len(tally.run),
               len(tally.lost), len(tally.twice),
               f"first job done {resumed * 1000:.0f} ms after Redis was back, all "
               f"{finished:.1f} s (every write fsynced); outage logged once per process; "
               "no worker replaced")


def test_redis_frozen_for_10_seconds_mid_run_loses_nothing(tmp_path):
    # Given a daemon (2 workers) working through 1500 jobs
    with mid_run(tmp_path, OwnRedis(persist=False), 2) as (server, d, c, jids, workers):
        # When Redis is frozen (SIGSTOP) for 10 s, then resumed
        server.freeze()
        time.sleep(10)  # the freeze lasts 10 s, by design
        server.thaw()
        thawed = time.monotonic()
        # Then the daemon carries on: every job runs to the end exactly once
        resumed, finished, tally = carries_on_without_loss(c, jids, thawed)
        # And no worker crashed, timed out into a crash loop, or was killed as silent: the
        # same processes serve on; the master logged the outage (its 5 s socket timeout)
        # once, and its end
        d.wait_log("Redis is back", 15)
        check_outage_logged_once(d.output(), 2)
        assert set(d.worker_pids()) == workers
        assert d.stop() == 0
        report("Redis frozen (SIGSTOP) for 10 s mid-run, then SIGCONT; 2 workers", JOBS_IN,
               len(tally.run), len(tally.lost), len(tally.twice),
               f"first job done {resumed * 1000:.0f} ms after the thaw, all {finished:.1f} s; "
               "no worker killed or replaced")


def test_redis_unreachable_at_boot_waits_logs_once_then_runs_every_job(tmp_path):
    # Given 500 jobs in a Redis (persisted) that is then shut down
    server = OwnRedis()
    server.start()
    jids = push(server.url, 500)
    server.shutdown()
    d = Daemon(server.url, tmp_path, require=JOBS, concurrency=2)
    try:
        # When the daemon boots while Redis is away, and Redis comes back 2 s later
        started = time.monotonic()
        d.start(wait=False)
        d.wait_log("Redis unreachable", 10)
        time.sleep(max(0.0, started + 2 - time.monotonic()))  # the outage lasts 2 s, by design
        assert d.proc.poll() is None
        server.start()
        up = time.monotonic()
        # Then the daemon connects, registers and runs every job
        c = client(server.url)
        resumed = first_progress(c)
        wait_for(lambda: done_count(c) == len(jids), 30, interval=0.05, what="every job to run")
        finished = time.monotonic() - up
        wait_for(lambda: c.scard("processes") == 1, 10, what="registration")
        tally = Tally(c, jids)
        assert tally.lost == set() and tally.twice == set()
        # And it logged the outage once (not once per retry), and its end
        out = d.output()
        assert len(log_lines(out, "Redis unreachable")) == 1
        assert len(log_lines(out, "Redis is back", "master")) == 1
        assert "Traceback" not in out
        assert d.stop() == 0
        report("Redis down when the daemon boots, started 2 s later (500 jobs waiting in it)",
               len(jids), len(tally.run), len(tally.lost), len(tally.twice),
               f"first job done {resumed * 1000:.0f} ms after Redis was up, all {finished:.1f} s "
               "(every write fsynced); outage logged once")
    finally:
        d.cleanup()
        server.stop()


def test_redis_refusing_writes_for_a_while_loses_nothing(tmp_path):
    # Given a daemon (2 workers) working through 1500 jobs
    with mid_run(tmp_path, OwnRedis(persist=False), 2) as (server, d, c, jids, workers):
        # When Redis refuses every write for 3 s (it wants a replica it does not have:
        # NOREPLICAS, as it answers MISCONF when it cannot write to its disk)
        c.config_set("min-replicas-to-write", 1)
        time.sleep(3)  # the refusal lasts 3 s, by design
        c.config_set("min-replicas-to-write", 0)
        resumed = first_progress(c)
        # Then the daemon carries on: every job runs to the end at least once
        wait_for(lambda: done_count(c) == JOBS_IN, 60, interval=0.05, what="every job to run")
        tally = Tally(c, jids)
        assert tally.lost == set()
        assert tally.twice == set()  # an outage is no reason to run a job again
        wait_for(lambda: held(c) == 0, 10, what="no job held")
        assert queued_jobs(c) == 0 and c.zcard("retry") == 0 and c.zcard("dead") == 0
        # When it refuses writes again while the workers are idle, until the master and each
        # worker have met the refusal (their fetches are writes: each meets it when its 2 s
        # block ends), and jobs are pushed once it accepts them
        met = {w: len(log_lines(d.output(), "NOREPLICAS", f"w{w}")) for w in range(2)}
        c.config_set("min-replicas-to-write", 1)
        wait_for(lambda: len(log_lines(d.output(), "NOREPLICAS", "master")) == 2 and all(
            len(log_lines(d.output(), "NOREPLICAS", f"w{w}")) > met[w] for w in range(2)),
            15, what="the master and both workers to meet the refusal")
        c.config_set("min-replicas-to-write", 0)
        t0 = time.monotonic()
        more = push(server.url, 100)
        wait_for(lambda: done_count(c) == JOBS_IN + 100, 30, what="the jobs pushed after")
        idle_resumed = time.monotonic() - t0
        # Then no process crashed: each logged each refusal at most once, the master did,
        # the same workers serve on
        out = d.output()
        assert len(log_lines(out, "NOREPLICAS", "master")) == 2
        for w in range(2):
            assert 1 <= len(log_lines(out, "NOREPLICAS", f"w{w}")) <= 2
        assert "crashed" not in out and "Traceback" not in out
        assert set(d.worker_pids()) == workers
        assert Tally(c, more).lost == set()
        assert d.stop() == 0
        report("Redis refuses every write for 3 s mid-run, then while idle until every "
               "process has met it "
               "(NOREPLICAS; MISCONF on a full disk is the same); 2 workers", JOBS_IN + 100,
               len(tally.run) + 100, len(tally.lost), len(tally.twice),
               f"first job done {resumed * 1000:.0f} ms after writes were allowed again; 100 "
               f"jobs pushed after the idle refusal done in {idle_resumed:.1f} s; logged once "
               "per refusal per process; no process crashed")
