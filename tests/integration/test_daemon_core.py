"""Real daemons against a real Redis: the promises an operator relies on."""
import os
import signal

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
    # Given one worker running a job (a 30 s lease, so only the master's reaping of its
    # worker can explain a rerun within the test's 10 s)
    d = daemon(concurrency=1)
    jid = jobs.Gate.perform_async("victim")
    wait_for(lambda: runs(r).get(jid) == 1, what="job start")
    (worker,) = d.worker_pids()
    # When the worker is SIGKILLed mid-job
    os.kill(worker, signal.SIGKILL)
    # Then the master puts the job back at once and a new worker runs it again, to the end
    wait_for(lambda: runs(r).get(jid) == 2, what="rerun")
    assert d.worker_pids() != [worker]
    jobs.open_gate(r, "victim")
    wait_for(lambda: r.hget(jobs.DONE, jid) == b"1", what="completion")
    assert d.stop() == 0
    assert r.llen("queue:default") == 0
    assert "worker 0 died (killed by SIGKILL (out of memory?)); 1 job(s) put back" in d.output()
