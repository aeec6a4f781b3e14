"""Real daemons against a real Redis: the promises an operator relies on."""
import signal
import time

import jobs
from harness import wait_for


def runs(r):
    return {k.decode(): int(v) for k, v in r.hgetall(jobs.RUNS).items()}


def test_every_job_runs_exactly_once_when_nothing_is_killed(daemon, producer, r):
    # Given a running daemon, When 500 jobs are pushed one by one and in bulk
    d = daemon()
    jids = [jobs.Record.perform_async(i) for i in range(200)]
    jids += jobs.Record.perform_bulk([[i] for i in range(300)])
    # Then each jid runs exactly once, and the stats count them
    wait_for(lambda: r.hlen(jobs.DONE) == 500, 30, what="500 jobs")
    assert runs(r) == {j: 1 for j in jids}
    assert d.stop() == 0
    assert int(r.get("stat:processed")) == 500
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_kill_9_of_a_worker_mid_job_puts_the_job_back_and_it_runs_again(daemon, producer, r):
    d = daemon(concurrency=1)
    jid = jobs.Sleep.perform_async(1.0, "victim")
    wait_for(lambda: runs(r).get(jid) == 1, what="job start")
    (worker,) = d.worker_pids()
    killed_at = time.time()
    worker_pid = worker
    import os
    os.kill(worker_pid, signal.SIGKILL)
    # The master requeues at once and a new worker runs it again to completion.
    wait_for(lambda: runs(r).get(jid) == 2, 5, what="rerun")
    assert time.time() - killed_at < 1.5
    wait_for(lambda: r.hget(jobs.DONE, jid) == b"1", 5, what="completion")
    assert d.stop() == 0
    assert r.llen("queue:default") == 0
    assert "killed by SIGKILL" in d.output()
