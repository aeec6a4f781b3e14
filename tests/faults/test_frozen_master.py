"""A master that is alive but silent past its lease (SIGSTOP on the master alone; its workers
run on): another master recovers its jobs, and when it wakes it notices, registers again and
renews, so what its workers reserve afterwards is still recovered if its host then dies."""
import os
import signal
import time

from faults import faultjobs
from faults.common import (JOBS, Tally, done_count, held, log_lines, per_jid, queued_jobs,
                           report)

from harness import wait_for, zjobs

LEASE = 2


def held_by(r, identity) -> int:
    """Jobs the slots of one master hold (reserved zsets and landing lists)."""
    return (sum(r.zcard(k) for k in r.keys(f"queued:reserved:{identity}:*"))
            + sum(r.llen(k) for k in r.keys(f"queued:landing:{identity}:*")))


def started(r, jids) -> bool:
    starts = per_jid(r, faultjobs.STARTS)
    return all(starts[j] >= 1 for j in jids)


def reaped_line(identity, n) -> str:
    return f"master {identity} stopped renewing its lease; {n} of its job(s) put back"


def test_a_frozen_master_is_reaped_notices_when_it_wakes_and_stays_recoverable(
        daemon, producer, r):
    # Given master A (2 workers, 2 s lease) running a job that succeeds and one that fails,
    # 4 s each, and master B idle beside it
    a = daemon(require=JOBS, concurrency=2, lease_timeout=LEASE)
    a_id = a.identity()
    hold = faultjobs.HoldOnce.perform_async(4, "a")
    fail = faultjobs.SlowFail.perform_async(4, "a")
    wait_for(lambda: started(r, [hold, fail]) and held_by(r, a_id) == 2, 10, what="A busy")
    b = daemon(require=JOBS, concurrency=2, lease_timeout=LEASE)
    # When A's master alone is frozen (SIGSTOP) past its lease; its workers run on
    os.kill(a.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    # Then B puts A's two jobs back and runs them again (at least once allows it)
    b.wait_log(reaped_line(a_id, 2), 10)
    reaped = time.monotonic() - frozen
    assert not r.hexists("queued:masters", a_id)
    # And A's workers' late ack and late failure change nothing: the ack finds nothing, the
    # failure is not written (the job runs again from its queue instead)
    a.wait_log("had lost their reservation", 10)
    a.wait_log("its end (retry) is not recorded", 10)
    # And A's workers take no new job while A is unregistered (what they reserved would sit
    # in slots no master recovers if A's host died now): B runs them all
    ticks = faultjobs.Tick.perform_bulk([[i, 50] for i in range(20)])
    wait_for(lambda: done_count(r) == 1 + len(ticks), 15, what="hold and the new jobs")
    assert "class=Tick" not in a.output()
    assert len(log_lines(a.output(), "this master is not registered")) == 1
    # When A wakes
    os.kill(a.pid, signal.SIGCONT)
    woke = time.monotonic()
    # Then it says its lease had expired and its jobs were put back, and registers again
    a.wait_log("this master's lease had expired", 5)
    (line,) = log_lines(a.output(), "this master's lease had expired", "master")
    assert "registration was gone" in line and "registered again" in line, line
    wait_for(lambda: r.hexists("queued:masters", a_id)
             and r.exists(f"queued:lease:{a_id}"), 5, what="A registered and leased again")
    noticed = time.monotonic() - woke
    # When B leaves, A's workers take two long jobs, and A's whole host dies (kill -9)
    assert b.stop() == 0
    late = [faultjobs.HoldOnce.perform_async(30, f"late{i}") for i in range(2)]
    wait_for(lambda: started(r, late) and held_by(r, a_id) == 2, 10, what="A holding both")
    a.kill_all()
    # Then a third master recovers them after A's lease, and every job ran
    c = daemon(require=JOBS, concurrency=2, lease_timeout=LEASE)
    c.wait_log(reaped_line(a_id, 2), 10)
    wait_for(lambda: done_count(r) == 3 + len(ticks), 15, what="every job to run")
    ok = [hold, *ticks, *late]
    tally = Tally(r, ok)
    assert tally.lost == set()
    assert tally.twice == {hold, *late}  # the ones in flight when A was reaped or killed
    assert per_jid(r, faultjobs.STARTS)[fail] == 2
    # And the failing job is in retry once (from B's run), nowhere else; nothing is left held
    (entry,) = zjobs(r, "retry")
    assert entry["jid"] == fail and entry["retry_count"] == 0
    # (a worker acks its last job with its next call, or as it goes idle: wait for that)
    wait_for(lambda: held(r) == 0, 10, what="the last acks")
    assert r.zcard("dead") == 0 and queued_jobs(r) == 0
    assert r.hkeys("queued:masters") == [c.identity().encode()]
    assert c.stop() == 0
    report("master frozen (SIGSTOP, its 2 workers running on) past its 2 s lease, another "
           "master beside it; 20 jobs pushed while frozen (run by the other); woken; then its "
           "host killed (kill "
           "-9 the group) holding 2 jobs reserved after it woke; a third master started",
           len(ok) + 1, f"{len(tally.run)} + the failing one in retry once", len(tally.lost),
           f"{len(tally.twice)} + the failing one (each in flight at a reap)",
           f"its 2 jobs put back {reaped:.1f} s after the freeze; late ack and failure "
           f"ignored; on waking it logged the lapse and registered again in {noticed:.2f} s; "
           "the 2 jobs it held when killed were recovered by the third master")


def test_a_reaped_master_still_frozen_takes_no_job_its_dead_host_would_strand(
        daemon, producer, r):
    # Given master A (2 idle workers, 2 s lease) and master B beside it, serving another queue
    a = daemon(require=JOBS, concurrency=2, lease_timeout=LEASE)
    a_id = a.identity()
    b = daemon(require=JOBS, concurrency=1, lease_timeout=LEASE, queues=["other"])
    # When A's master alone is frozen past its lease, B reaps it, and jobs are pushed
    os.kill(a.pid, signal.SIGSTOP)
    b.wait_log(reaped_line(a_id, 0), 10)
    jids = faultjobs.Tick.perform_bulk([[i, 1] for i in range(20)])
    a.wait_log("this master is not registered", 5)
    # Then A's workers leave them in the queue (they reserved them before: into slots no
    # master knows, lost for good once A's host died)
    time.sleep(1.0)  # the time A's workers would have needed to take them all
    assert queued_jobs(r) == 20 and held_by(r, a_id) == 0
    # When A's host dies before A wakes, and a new master starts
    a.kill_all()
    c = daemon(require=JOBS, concurrency=2, lease_timeout=LEASE)
    # Then every job runs; only the one that landed on each of A's blocked workers (BLMOVE
    # knows nothing of registrations) ran twice: A's worker started it as it landed, and its
    # reserve call put it back, unregistered
    wait_for(lambda: done_count(r) == len(jids), 15, what="every job to run")
    tally = Tally(r, jids)
    assert tally.lost == set() and len(tally.twice) <= 2
    wait_for(lambda: held(r) == 0, 10, what="the acks")  # (they ride with the next call)
    assert queued_jobs(r) == 0
    assert b.stop() == 0 and c.stop() == 0
    report("master frozen past its 2 s lease and reaped while idle; 20 jobs pushed; its host "
           "killed (kill -9 the group) before it woke; a new master started", len(jids),
           len(tally.run), len(tally.lost), len(tally.twice),
           "its workers took nothing while it was unregistered; the new master ran them all")
