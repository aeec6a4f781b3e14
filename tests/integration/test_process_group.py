"""Ctrl-C and Ctrl-Z typed in the terminal a daemon runs in: the terminal signals the whole
foreground process group, the master and every worker at once (tests/terminal.py). Workers
leave INT and TSTP to their master, so the outcome is the master's graceful stop or quiet,
exactly as if only the master had been signalled."""
import json
import os

import jobs
import psutil
import pytest
from harness import counts, wait_for
from terminal import CTRL_C, CTRL_Z, TerminalDaemon


@pytest.fixture
def terminal(redis_url, tmp_path, r):
    """``terminal(*flags, **settings)`` starts a daemon in a terminal of its own."""
    started = []

    def start(*extra, **settings):
        d = TerminalDaemon(redis_url, tmp_path, **settings)
        started.append(d)
        return d.start(*extra)

    yield start
    for d in started:
        d.cleanup()


def runs(r):
    return counts(r, jobs.RUNS)


def done(r):
    return counts(r, jobs.DONE)


def in_the_foreground(d) -> None:
    """The master and its workers are the terminal's foreground group: what is typed there
    signals every one of them."""
    assert d.foreground_group() == d.pid
    workers = d.worker_pids()
    assert len(workers) == 2
    assert {os.getpgid(p) for p in workers} == {d.pid}


def test_ctrl_c_in_the_terminal_lets_running_jobs_finish_and_exits_0(terminal, producer, r):
    # Given a daemon in a terminal running two jobs that end within its shutdown timeout
    d = terminal(timeout=10)
    in_the_foreground(d)
    jids = [jobs.Sleep.perform_async(1.0, i) for i in range(2)]
    wait_for(lambda: set(runs(r)) == set(jids), 10, what="both jobs running")
    # When Ctrl-C is typed (SIGINT to the master and both workers)
    d.type(CTRL_C)
    # Then the master stops gracefully: the jobs finish once each, nothing is requeued
    d.wait_log("SIGINT: shutting down", 5)
    assert d.wait(10) == 0
    assert done(r) == {j: 1 for j in jids} and runs(r) == {j: 1 for j in jids}
    assert r.llen("queue:default") == 0 and not r.keys("queued:reserved:*")
    out = d.output()
    assert "KeyboardInterrupt" not in out and "Traceback" not in out
    assert "died" not in out  # no worker was taken down by the SIGINT


def test_ctrl_c_twice_in_the_terminal_stops_now_and_requeues(terminal, producer, r):
    # Given a daemon in a terminal running two long jobs
    d = terminal(timeout=20)
    jids = [jobs.SlowFirst.perform_async(30, i) for i in range(2)]
    wait_for(lambda: set(runs(r)) == set(jids), 10, what="both jobs running")
    # When Ctrl-C is typed twice
    d.type(CTRL_C)
    d.wait_log("SIGINT: shutting down", 5)
    d.type(CTRL_C)
    # Then it stops at once, both jobs back in their queue, exit 0
    assert d.wait(10) == 0
    assert "SIGINT again: stopping now" in d.output()
    queued = sorted(json.loads(p)["jid"] for p in r.lrange("queue:default", 0, -1))
    assert queued == sorted(jids)
    assert done(r) == {} and not r.keys("queued:reserved:*")
    assert "KeyboardInterrupt" not in d.output()


def test_ctrl_z_in_the_terminal_quiets_the_daemon_and_suspends_no_process(
        terminal, producer, r):
    # Given a daemon in a terminal running one job
    d = terminal()
    identity = d.identity()
    workers = d.worker_pids()
    running = jobs.Sleep.perform_async(1.0, "running")
    wait_for(lambda: running in runs(r), 10, what="job start")
    # When Ctrl-Z is typed (SIGTSTP to the master and both workers)
    d.type(CTRL_Z)
    # Then the daemon goes quiet; no process is suspended: the job runs to its end, the
    # workers leave, the master stays (a job pushed now waits)
    wait_for(lambda: r.hget(identity, "quiet") == b"true", 5, what="quiet heartbeat")
    assert psutil.Process(d.pid).status() != psutil.STATUS_STOPPED
    waiting = jobs.Record.perform_async("waiting")
    wait_for(lambda: done(r).get(running) == 1, 5, what="the running job to finish")
    wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status()
                             != psutil.STATUS_ZOMBIE for p in workers), 5,
             what="the workers to leave")
    assert psutil.Process(d.pid).status() != psutil.STATUS_STOPPED
    assert waiting not in runs(r)
    # When Ctrl-C follows, it exits 0
    d.type(CTRL_C)
    assert d.wait(10) == 0
    assert r.llen("queue:default") == 1  # the waiting job, for the next daemon
