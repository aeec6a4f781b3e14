"""Booting a real daemon: bad job code, bad config, Redis away, workers that die at boot."""
import re
import signal
import tempfile
import time

import jobs
import pytest
import redis
from conftest import RedisServer, find_redis_server, free_port
from harness import Daemon, counts, wait_for

import queued
from queued.errors import EXIT_REDIS_ERROR


def one_line(text):
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_job_code_that_raises_at_import_stops_the_boot_with_exit_4(daemon, r):
    # Given job code whose import raises
    d = daemon(require=("jobmods/raises_at_import.py",), wait=False)
    # Then queued exits 4 with one line naming the file and the error, and no traceback
    assert d.wait(15) == 4
    line = one_line(d.output())
    assert line.startswith("queued: cannot load job code ")
    assert "raises_at_import.py" in line
    assert "RuntimeError: kaboom at import" in line
    assert re.search(r"raises_at_import\.py:\d+\)$", line)
    assert "Traceback" not in d.output()
    assert r.smembers("processes") == set()


def test_missing_job_code_stops_the_boot_with_exit_4(daemon):
    d = daemon(require=("jobmods/no_such_file.py",), wait=False)
    assert d.wait(15) == 4
    line = one_line(d.output())
    assert line.startswith("queued: cannot load job code ") and "no_such_file.py" in line


# A bad config (unknown key, wrong type, bad queue weight, unreadable file, bad Redis URL):
# tests/faults/test_bad_config.py.


def redis_at(url):
    return redis.Redis.from_url(url, socket_timeout=2)


# Redis unreachable when the daemon boots (waits, logs once, then runs every job):
# tests/faults/test_redis_outages.py.


def test_term_while_waiting_for_redis_exits_0(tmp_path):
    d = Daemon(f"redis://127.0.0.1:{free_port()}/0", tmp_path)
    try:
        d.start(wait=False)
        d.wait_log("Redis unreachable", 10)
        d.signal(signal.SIGTERM)
        assert d.wait(10) == 0
    finally:
        d.cleanup()


@pytest.mark.parametrize("status", ["3", "1"])
def test_workers_that_die_at_boot_are_respawned_with_backoff(daemon, r, status):
    # Given job code that kills every worker right after fork (exit 3 = boot error, or 1)
    d = daemon(require=("jobs.py", "jobmods/crash_at_fork.py"), concurrency=2,
               env={"QUEUED_TEST_FORK_EXIT": status}, wait=False)
    # When it keeps trying, until each slot's worker has died three times
    def deaths():
        return re.findall(r"worker (\d) \(pid \d+\) died [\d.]+s after boot \(exit code "
                          r"(\d+)\); respawning in ([\d.]+)s", d.output())

    found = wait_for(lambda: all(sum(s == slot for s, _, _ in deaths()) >= 3 for slot in "01")
                     and deaths(), what="three deaths per slot")
    # Then the master backs off: per slot, 0.2 s doubling up to 30 s (docs/operating.md), so
    # it forked a handful of workers, not hundreds
    assert len(found) <= 20, found
    assert {code for _, code, _ in found} == {status}
    for slot in ("0", "1"):
        delays = [float(delay) for s, _, delay in found if s == slot]
        assert delays == [round(min(0.2 * 2 ** i, 30.0), 1) for i in range(len(delays))], delays
    # And it is still up and stops cleanly on TERM, however long its backoff
    assert d.proc.poll() is None
    assert r.sismember("processes", d.identity() or "")
    d.signal(signal.SIGTERM)
    assert d.wait(10) == 0


def test_redis_going_away_mid_run_is_survived(tmp_path):
    # Given a daemon serving jobs from its own Redis
    server = RedisServer(find_redis_server())
    server.start()
    d = Daemon(server.url, tmp_path)
    try:
        d.start()
        identity = d.identity()
        client = queued.Client(url=server.url)
        c = redis_at(server.url)
        jid = client.push({"class": jobs.Record, "args": ["before"]})
        wait_for(lambda: counts(c, jobs.DONE).get(jid) == 1, 5, what="a job before")
        # When Redis stops (losing its data: no persistence) and comes back 1.5 s later
        server.stop()
        d.wait_log("Redis unreachable", 10)
        time.sleep(1.5)  # the outage lasts 1.5 s, by design
        assert d.proc.poll() is None
        server.dir = tempfile.mkdtemp(prefix="queued-test-redis-")  # stop() removed it
        server.start()
        # Then the daemon carries on: it serves jobs again and re-announces itself (process
        # record, master registration, lease), so Sidekiq's tools and other masters see it
        jid = client.push({"class": jobs.Record, "args": ["after"]})
        wait_for(lambda: counts(c, jobs.DONE).get(jid) == 1, 15, what="a job after")
        wait_for(lambda: c.sismember("processes", identity), 5, what="the process record")
        wait_for(lambda: c.hexists("queued:masters", identity), 5, what="the registration")
        assert c.exists(f"queued:lease:{identity}")
        # And the outage was logged once per process, not once per retry
        out = d.output()
        master_lines = [x for x in out.splitlines()
                        if "tid=master" in x and "Redis unreachable" in x]
        assert len(master_lines) == 1, master_lines
        for slot in ("w0", "w1"):
            assert len([x for x in out.splitlines()
                        if f"tid={slot} " in x and "Redis unreachable" in x]) <= 1
        assert d.stop() == 0
    finally:
        d.cleanup()
        server.stop()


def test_term_while_redis_is_away_mid_run_exits_at_the_deadline(tmp_path):
    # Given a running daemon (2 s shutdown timeout) whose Redis has gone away
    server = RedisServer(find_redis_server())
    server.start()
    d = Daemon(server.url, tmp_path, timeout=2)
    try:
        d.start()
        server.stop()
        d.wait_log("Redis unreachable", 10)
        # When it is told to stop
        d.signal(signal.SIGTERM)
        # Then it stops by its deadline (its workers' slots cannot be put back; they stay
        # registered for the reaper) instead of waiting for Redis for ever, with the status
        # that tells a supervisor so
        assert d.wait(2 + 8) == EXIT_REDIS_ERROR == 5
        assert "stay reserved" in d.output()
    finally:
        d.cleanup()
        server.stop()


def test_a_term_while_the_job_code_loads_stops_the_daemon_cleanly(daemon, r):
    # Given a daemon still importing its job code (seconds, as a big application takes)
    d = daemon(require=("jobmods/slow_import.py",), wait=False)
    wait_for(lambda: r.get("t:importing"), 10, what="the import to begin")
    # When it is told to stop before the master's signal handlers exist
    d.signal(signal.SIGTERM)
    r.set("t:import_gate", 1)  # (the import ends after the TERM came: slow_import.py)
    # Then it finishes loading, then stops cleanly: exit 0, not killed by the TERM (-15),
    # nothing left registered
    assert d.wait(15) == 0
    out = d.output()
    assert "TERM: shutting down" in out and "bye" in out
    assert r.hlen("queued:masters") == 0
    assert r.smembers("processes") == set()
