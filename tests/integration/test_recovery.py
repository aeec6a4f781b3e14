"""Reliable fetch under fire: workers and whole hosts die, and no job is lost."""
import json
import os
import signal

import jobs
import pytest
from harness import counts, pid_alive, wait_for, zjobs


def runs(r):
    return counts(r, jobs.RUNS)


def done(r):
    return counts(r, jobs.DONE)


def held(r):
    """Jobs some worker slot still holds (reserved zsets and landing lists)."""
    return (sum(r.zcard(k) for k in r.keys("queued:reserved:*"))
            + sum(r.llen(k) for k in r.keys("queued:landing:*")))


def all_acked(r, what="the finished jobs' acks") -> None:
    """Wait until no slot holds a job any more. A worker's ack (ZREM of its finished job's
    reservation) rides with its next Redis call, so a job can be seen done before its ack
    lands: checking ``held(r) == 0`` at once failed now and then."""
    wait_for(lambda: held(r) == 0, 10, what=what)


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_killing_workers_repeatedly_under_load_loses_nothing(daemon, producer, r):
    # Given a daemon working through a deep queue of short jobs (so workers prefetch batches)
    d = daemon(concurrency=2)
    jids = jobs.Sleep.perform_bulk([[0.002, i] for i in range(200)])
    killed = set()
    # When its workers are SIGKILLed four times while they run
    for _ in range(4):
        fresh = wait_for(lambda: [p for p in d.worker_pids() if p not in killed], 10,
                         what="live workers")
        progressed = sum(runs(r).values()) + 5

        def working(progressed=progressed):
            return sum(runs(r).values()) >= progressed or r.llen("queue:default") == 0

        wait_for(working, 10, what="workers to make progress")
        for pid in fresh:
            kill(pid)
            killed.add(pid)
    # Then every jid still runs to the end at least once, and nothing is left anywhere
    # (no job queued, reserved or landed: so none is running either)
    wait_for(lambda: set(done(r)) == set(jids) and r.llen("queue:default") == 0
             and held(r) == 0, 30, what="every job to finish")
    # And only a kill cut a run short: the runs that never finished are at most one per
    # killed worker (the job it was running)
    assert set(runs(r)) == set(jids)
    assert sum(runs(r).values()) - sum(done(r).values()) <= len(killed)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    # And the master saw each kill, once (">= 4" also counted the lines about the jobs)
    assert d.output().count(" died (killed by SIGKILL") == len(killed)
    assert d.stop() == 0


@pytest.mark.parametrize("how,status", [("kill", "killed by SIGKILL"),
                                        ("segv", "killed by SIGSEGV"),
                                        ("exit", "exit code 7"),
                                        ("exit0", "exit code 0")])
def test_a_poison_pill_goes_to_dead_after_max_crashes(daemon, producer, r, how, status):
    # Given a daemon that tolerates 3 crashes per job
    d = daemon(concurrency=2, max_crashes=3)
    first_workers = set(d.worker_pids())
    # When a job kills its worker every time it runs, among ordinary jobs
    pill = jobs.Crash.perform_async(how)
    others = [jobs.Record.perform_async(i) for i in range(20)]
    # Then after its third run it is dead with error_class WorkerKilled, and never runs again
    entry = wait_for(lambda: zjobs(r, "dead"), 15, what="poison pill in dead")
    assert len(entry) == 1
    entry = entry[0]
    assert entry["jid"] == pill
    assert entry["error_class"] == "WorkerKilled"
    assert "killed its worker 3 times" in entry["error_message"]
    assert status in entry["error_message"]
    assert entry["retry_count"] == 0 and entry["args"] == [how]
    assert runs(r)[pill] == 3
    # And the other jobs were served, the crashed workers were replaced by new processes
    nxt = jobs.Record.perform_async("after")
    wait_for(lambda: all(done(r).get(j) == 1 for j in others + [nxt]), 15, what="other jobs")
    assert runs(r)[pill] == 3 and r.llen("queue:default") == 0 and r.zcard("retry") == 0
    assert len(d.wait_up()) == 2  # both workers back
    assert set(d.worker_pids()) - first_workers
    # A job's crash is not a boot failure: the worker is replaced at once, without backoff
    assert "respawning in" not in d.output()
    assert d.output().count(f"class=Crash jid={pill} killed its worker") == 3
    assert d.stop() == 0


def test_a_job_that_crashes_once_is_rerun_and_succeeds(daemon, producer, r):
    d = daemon(concurrency=1)
    (worker,) = d.worker_pids()
    # When a job kills its worker on its first run only
    jid = jobs.Crash.perform_async("kill", 1)
    # Then a new worker (a new pid) runs it again, and it finishes; nothing in retry or dead
    wait_for(lambda: done(r).get(jid) == 1, 10, what="rerun to finish")
    assert runs(r)[jid] == 2
    assert d.worker_pids() and d.worker_pids() != [worker]
    all_acked(r)
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0
    assert d.stop() == 0


def test_a_dead_host_is_recovered_by_another_master_after_its_lease(daemon, producer, r):
    # Given a daemon with a 2 s lease running two long jobs
    d1 = daemon(concurrency=2, lease_timeout=2)
    dead_identity = d1.identity()
    jids = [jobs.SlowFirst.perform_async(30, i) for i in range(2)]
    wait_for(lambda: set(runs(r)) == set(jids), 10, what="both jobs running")
    # When the master and its workers are SIGKILLed together (the host dies)
    d1.kill_all()
    assert held(r) == 2  # the jobs sit in the dead master's slots
    # Then a second daemon (watched from its start) puts them back once the lease has expired,
    # never while it lives, and they run to the end
    d2 = daemon(concurrency=2, lease_timeout=2, wait=False)
    lease = f"queued:lease:{dead_identity}"

    def rerun():
        pipe = r.pipeline(transaction=True)  # the lease, registration and runs at one instant
        pipe.exists(lease)
        pipe.hexists("queued:masters", dead_identity)
        pipe.hgetall(jobs.RUNS)
        alive, registered, raw = pipe.execute()
        n = {k.decode(): int(v) for k, v in raw.items()}
        assert not alive or (registered and n == {j: 1 for j in jids}), \
            f"reaped while the lease lived: runs {n}"
        return all(n.get(j) == 2 for j in jids)

    wait_for(rerun, 15, what="recovered jobs to rerun")
    wait_for(lambda: done(r) == {j: 1 for j in jids}, what="recovered jobs to finish")
    all_acked(r, "the recovered jobs' acks")
    assert runs(r) == {j: 2 for j in jids}
    assert not r.hexists("queued:masters", dead_identity)
    assert r.llen("queue:default") == 0
    assert f"master {dead_identity} stopped renewing its lease; 2 of its job(s)" in d2.output()
    assert d2.stop() == 0


def test_when_the_master_alone_dies_its_workers_die_with_it_and_the_job_runs_once_more(
        daemon, producer, r):
    # Given a daemon running a job longer than the lease, and a second daemon beside it
    d1 = daemon(concurrency=2, lease_timeout=2)
    workers, identity = d1.worker_pids(), d1.identity()
    jid = jobs.Gate.perform_async("orphaned")
    wait_for(lambda: jid in runs(r), 5, what="job start")
    d2 = daemon(concurrency=2, lease_timeout=2, queues=["other"])  # reaps, runs nothing here
    # When only the first master is SIGKILLed
    os.kill(d1.pid, signal.SIGKILL)
    d1.proc.wait(5)
    # Then its workers die at once (the kernel SIGKILLs them: PR_SET_PDEATHSIG), instead of
    # finishing a job that another master takes back and runs once the lease expires: with
    # a TERM they ran it to its end while it ran again elsewhere, twice at the same time
    # (10 s bounds only a failure: the job would run until its gate opens, much later)
    wait_for(lambda: not any(pid_alive(p) for p in workers), 10, what="orphans to die")
    assert done(r) == {}
    # And once the lease is gone the job goes back to its queue, and a daemon serving that
    # queue runs it again, once
    wait_for(lambda: r.llen("queue:default") == 1, 10, what="the job put back")
    assert f"master {identity} stopped renewing its lease" in d2.wait_log(
        "stopped renewing its lease")
    jobs.open_gate(r, "orphaned")
    d3 = daemon(concurrency=1, lease_timeout=2)
    wait_for(lambda: done(r).get(jid) == 1, 10, what="the rerun")
    all_acked(r, "the rerun's ack")
    assert runs(r) == {jid: 2} and done(r) == {jid: 1}
    assert d2.stop() == 0 and d3.stop() == 0


def test_a_job_longer_than_the_lease_is_not_recovered_while_its_master_lives(
        daemon, producer, r):
    # Given two daemons with a 2 s lease, one of them running a job
    d1 = daemon(concurrency=1, lease_timeout=2)
    jid = jobs.Gate.perform_async("long")
    wait_for(lambda: jid in runs(r), what="job start")
    first_expiry = r.pexpiretime(f"queued:lease:{d1.identity()}") / 1000  # unless renewed
    d2 = daemon(concurrency=1, lease_timeout=2)
    # When the job runs on past the lease it started under, until the other master has
    # looked for expired leases (it does on every beat) after that lease would have expired
    # (its next beat after one past the expiry: that one's reap is done by then)
    def beat():
        return float(r.hget(d2.identity(), "beat") or 0)

    past = wait_for(lambda: beat() > first_expiry and beat(), what="a beat past the expiry")
    wait_for(lambda: beat() > past, what="the beat after it")
    # Then the other master has not taken it: its master's heartbeat kept renewing the lease
    assert "stopped renewing" not in d2.output()
    assert runs(r) == {jid: 1}
    # And the job runs once, to the end
    jobs.open_gate(r, "long")
    wait_for(lambda: done(r).get(jid) == 1, what="the long job")
    assert runs(r) == {jid: 1}
    assert "stopped renewing" not in d2.output()
    assert d1.stop() == 0 and d2.stop() == 0


def test_two_masters_reaping_the_same_dead_host_requeue_each_job_once(daemon, producer, r):
    # Given a dead host that held four jobs (its master and workers SIGKILLed together)
    d1 = daemon(concurrency=4, lease_timeout=2)
    dead_identity = d1.identity()
    jids = [jobs.SlowFirst.perform_async(30, i) for i in range(4)]
    wait_for(lambda: set(runs(r)) == set(jids), 10, what="four jobs running")
    d1.kill_all()
    wait_for(lambda: not r.exists(f"queued:lease:{dead_identity}"), 5, what="lease expiry")
    # When two masters start at the same moment (serving another queue, so the requeued jobs
    # stay where they can be counted) and both reap
    others = [daemon(queues=["other"], lease_timeout=2, wait=False) for _ in range(2)]
    # Then the dead master's jobs are in its queue exactly once each
    wait_for(lambda: not r.hexists("queued:masters", dead_identity), 10, what="reaping")
    queued = [json.loads(p)["jid"] for p in r.lrange("queue:default", 0, -1)]
    assert sorted(queued) == sorted(jids)
    assert held(r) == 0
    wait_for(lambda: all(o.identity() for o in others), 10, what="both masters up")
    said = f"master {dead_identity} stopped renewing"
    # (the line comes after the reap: stop both masters, so every line either would ever
    # write is written, then count exactly)
    for o in others:
        assert o.stop() == 0
    reaps = [o.output().count(said) for o in others]
    assert sorted(reaps) == [0, 1]


def test_a_crash_counts_against_the_running_job_not_a_finished_one_of_its_batch(
        daemon, producer, r):
    # Given a deep queue of quick jobs (reserved in batches of up to 8) with poison pills
    # at different places among them
    quick, pills = [], []
    for group in range(5):
        quick += jobs.Record.perform_bulk([[i] for i in range(5 + 3 * group)])
        pills.append(jobs.Crash.perform_async("kill"))
    quick += jobs.Record.perform_bulk([[i] for i in range(10)])
    # When one worker runs them
    d = daemon(concurrency=1, max_crashes=3)
    # Then only the pills are charged with crashes, and they alone are dead after three each
    wait_for(lambda: set(done(r)) == set(quick), 20, what="the quick jobs")
    wait_for(lambda: r.zcard("dead") == len(pills), 20, what="pills in dead")
    assert sorted(e["jid"] for e in zjobs(r, "dead")) == sorted(pills)
    assert all(runs(r)[p] == 3 for p in pills)
    assert all(runs(r)[j] == 1 for j in quick)
    out = d.output()
    assert all(out.count(f"class=Crash jid={p} killed its worker") == 3 for p in pills)
    assert [x for x in out.splitlines() if "killed its worker" in x and "class=Record" in x] == []
    assert d.stop() == 0
