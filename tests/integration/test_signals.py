"""Signals to a real master: graceful stop, quiet, thread dumps, and the Web UI's remote signals.

Every outcome is counted by jid in Redis (jobs.RUNS, jobs.DONE) or read from the daemon's
own records (processes, <identity> hash, /proc/<pid>/cmdline), never inferred from a sleep.
"""
import json
import re
import signal
import time

import jobs
import psutil
import pytest
from harness import counts, pid_alive, wait_for


def runs(r):
    return counts(r, jobs.RUNS)


def done(r):
    return counts(r, jobs.DONE)


def reserved_keys(r):
    return r.keys("queued:reserved:*") + r.keys("queued:landing:*")


def assert_left_cleanly(r, identity):
    """What a stopped master leaves (SIDEKIQ_FORMAT.md section 6): not in processes, no
    :workers hash, no lease, nothing reserved."""
    assert identity.encode() not in r.smembers("processes")
    assert not r.exists(f"{identity}:workers")
    assert not r.exists(f"queued:lease:{identity}")
    assert not r.hexists("queued:masters", identity)
    assert reserved_keys(r) == []


def test_term_with_jobs_longer_than_the_timeout_requeues_them(daemon, producer, r):
    # Given a daemon with a 1 s shutdown timeout (-t 1) running two jobs that need 30 s
    d = daemon("-t", "1")
    identity = d.identity()
    jids = [jobs.SlowFirst.perform_async(30, i) for i in range(2)]
    wait_for(lambda: set(runs(r)) == set(jids), 10, what="both jobs running")
    # When it gets TERM
    d.signal(signal.SIGTERM)
    # Then it exits 0 at the deadline (not after the jobs' 30 s), with both jobs back in their
    # queue, unfinished
    assert d.wait(10) == 0
    assert r.llen("queue:default") == 2
    assert sorted(json.loads(p)["jid"] for p in r.lrange("queue:default", 0, -1)) == sorted(jids)
    assert done(r) == {}
    assert_left_cleanly(r, identity)
    assert "put back" in d.output()
    # And a fresh daemon runs each of them once more, to the end: twice in all, none lost
    d2 = daemon()
    wait_for(lambda: done(r) == {j: 1 for j in jids}, 10, what="requeued jobs to finish")
    assert runs(r) == {j: 2 for j in jids}
    assert d2.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_term_with_short_jobs_lets_them_finish(daemon, producer, r, sig):
    # Given a daemon with a 60 s shutdown timeout, running two jobs
    d = daemon(timeout=60)
    identity = d.identity()
    jids = [jobs.Gate.perform_async("short") for _ in range(2)]
    wait_for(lambda: set(runs(r)) == set(jids), what="both jobs running")
    # When it gets TERM (or INT, a Ctrl-C) and the jobs end after it
    d.signal(sig)
    d.wait_log("shutting down")
    assert d.proc.poll() is None and done(r) == {}  # waiting for them
    jobs.open_gate(r, "short")
    # Then the jobs finish, it exits 0 without waiting for the deadline, nothing is requeued
    assert d.wait(10) == 0
    assert done(r) == {j: 1 for j in jids}
    assert runs(r) == {j: 1 for j in jids}
    assert r.llen("queue:default") == 0
    assert_left_cleanly(r, identity)
    assert int(r.get("stat:processed")) == 2


def test_second_term_hurries_the_stop_and_loses_nothing(daemon, producer, r):
    # Given a daemon with a long shutdown timeout, running two long jobs, already stopping
    d = daemon(timeout=20)
    identity = d.identity()
    jids = [jobs.SlowFirst.perform_async(30, i) for i in range(2)]
    wait_for(lambda: set(runs(r)) == set(jids), 10, what="both jobs running")
    d.signal(signal.SIGTERM)
    d.wait_log("shutting down")
    wait_for(lambda: d.title().endswith("[2 of 2 busy] stopping"), 5, what="stopping title")
    assert r.hget(identity, "quiet") == b"true"  # a stopping process fetches no more
    # When a second TERM arrives during the wait
    d.signal(signal.SIGTERM)
    # Then it stops at once (not after 20 s), exit 0, and both jobs are back in the queue
    assert d.wait(10) == 0
    assert "stopping now" in d.output()
    assert r.llen("queue:default") == 2
    assert_left_cleanly(r, identity)
    d2 = daemon()
    wait_for(lambda: done(r) == {j: 1 for j in jids}, 10, what="requeued jobs to finish")
    assert runs(r) == {j: 2 for j in jids}
    assert d2.stop() == 0


def heartbeat_quiet(r, identity):
    return r.hget(identity, "quiet")


@pytest.mark.parametrize("how", ["USR1", "TSTP", "remote TSTP"])
def test_quiet_finishes_the_running_job_and_fetches_no_more(daemon, producer, r, how):
    # Given a daemon running one job
    d = daemon()
    identity = d.identity()
    running = jobs.Gate.perform_async("running")
    wait_for(lambda: running in runs(r), what="job start")
    # When it is told to be quiet (a signal, or the Web UI's LPUSH <identity>-signals)
    if how == "remote TSTP":
        r.lpush(f"{identity}-signals", "TSTP")
        r.expire(f"{identity}-signals", 60)
    else:
        d.signal(getattr(signal, f"SIG{how}"))
    # Then the heartbeat says quiet and so does the master's process title
    wait_for(lambda: heartbeat_quiet(r, identity) == b"true", what="quiet heartbeat")
    wait_for(lambda: "quiet" in d.title(), what="quiet title")
    # And the idle worker leaves, the busy one stays for its job
    wait_for(lambda: len(d.worker_pids()) == 1, what="the idle worker to leave")
    # And a job pushed now is not fetched, while the running one completes
    waiting = jobs.Record.perform_async("waiting")
    assert done(r) == {}
    jobs.open_gate(r, "running")
    wait_for(lambda: done(r).get(running) == 1, what="running job to finish")
    wait_for(lambda: d.worker_pids() == [], what="workers to leave")
    assert waiting not in runs(r)
    assert r.llen("queue:default") == 1
    assert json.loads(r.lindex("queue:default", 0))["jid"] == waiting
    # And the master stays, visible as quiet, until it is stopped: then it exits 0 quickly
    assert pid_alive(d.pid)
    assert identity.encode() in r.smembers("processes")
    assert heartbeat_quiet(r, identity) == b"true"
    if how == "remote TSTP":
        r.lpush(f"{identity}-signals", "TERM")
    else:
        d.signal(signal.SIGTERM)
    assert d.wait(10) == 0
    assert_left_cleanly(r, identity)
    assert r.llen("queue:default") == 1  # still waiting for the next daemon, not lost


def test_remote_term_stops_the_daemon(daemon, producer, r):
    # Given a running daemon with a job in hand
    d = daemon(timeout=60)
    identity = d.identity()
    jid = jobs.Gate.perform_async("in-hand")
    wait_for(lambda: jid in runs(r), what="job start")
    # When the Web UI's "Stop" button writes TERM into <identity>-signals
    r.lpush(f"{identity}-signals", "TERM")
    r.expire(f"{identity}-signals", 60)
    # Then the next beat reads it and the daemon stops: the running job finishes, it exits 0
    d.wait_log("remote signal TERM")
    assert done(r) == {}
    jobs.open_gate(r, "in-hand")
    assert d.wait(10) == 0
    assert done(r) == {jid: 1}
    assert "shutting down" in d.output()
    assert_left_cleanly(r, identity)


def test_ttin_logs_each_worker_and_its_python_stack(daemon, producer, r):
    # Given two workers, one of them running a job
    d = daemon()
    jid = jobs.Gate.perform_async("dumped")
    wait_for(lambda: jid in runs(r), what="job start")
    # When the master gets TTIN
    d.signal(signal.SIGTTIN)
    # Then the log has three labelled stacks, each one record written whole (a worker writes
    # its own in one write), in order: the master's, then worker 0's, then worker 1's
    out = wait_for(lambda: d.output().count("; stack:") == 3 and d.output(), 10,
                   what="three stacks")
    heads = [line for line in out.splitlines() if line.endswith("; stack:")]
    assert re.search(r" tid=master INFO queued.master: TTIN master pid=\d+ \(SIGTTIN\)$",
                     heads[0][:-len("; stack:")])
    assert [re.search(r"tid=(\w+) ", h).group(1) for h in heads[1:]] in (["w0", "w1"],)
    assert [re.search(r"TTIN worker (\d)", h).group(1) for h in heads[1:]] == ["0", "1"]
    busy = [h for h in heads if "running Gate" in h]
    assert len(busy) == 1 and f"jid={jid}" in busy[0]
    # (the busy worker's record carries the job's context, as every line the job logs does)
    assert f" class=Gate jid={jid} INFO queued.worker: TTIN worker" in busy[0]
    assert sum("idle; stack:" in h for h in heads) == 1
    # And the busy worker's stack shows the job where it waits
    record = out[out.index(busy[0]):].split("\n20")[0]
    assert re.search(r'File "[^"]*jobs\.py", line \d+, in perform', record), record
    # And the master's summary names each worker and what it runs
    assert "TTIN worker 0 pid=" in out and "TTIN worker 1 pid=" in out
    # And the daemon carries on: the job finishes, the daemon stops cleanly
    jobs.open_gate(r, "dumped")
    wait_for(lambda: done(r).get(jid) == 1, what="job to finish")
    assert d.stop() == 0


def cpu_seconds(pid, window=1.0):
    """CPU time a process uses over ``window`` seconds of wall time: the sleep is the
    observation window (a master that spins uses most of it; one that idles, almost none)."""
    p = psutil.Process(pid)
    before = sum(p.cpu_times()[:2])
    time.sleep(window)
    return sum(p.cpu_times()[:2]) - before


def test_a_running_quiet_or_stopping_master_idles(daemon, producer, r):
    # Given a daemon running one long job
    d = daemon(timeout=20)
    identity = d.identity()
    jid = jobs.SlowFirst.perform_async(30)
    wait_for(lambda: jid in runs(r), 5, what="job start")
    # Then the master sleeps between its timers while running, quiet and stopping
    assert cpu_seconds(d.pid) < 0.3
    d.signal(signal.SIGTSTP)
    wait_for(lambda: r.hget(identity, "quiet") == b"true", 5, what="quiet")
    assert cpu_seconds(d.pid) < 0.3
    d.signal(signal.SIGTERM)
    d.wait_log("shutting down")
    assert cpu_seconds(d.pid) < 0.3
    d.signal(signal.SIGTERM)
    assert d.wait(10) == 0
