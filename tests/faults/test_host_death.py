"""A whole host dies (master and workers SIGKILLed together) with many jobs in flight; a new
master recovers them once the dead one's lease expires."""
import time

from faults import faultjobs
from faults.common import JOBS, Tally, done_count, held, log_lines, queued_jobs, report

from harness import wait_for

JOBS_IN = 2000


def test_master_and_workers_sigkilled_together_then_a_new_master_recovers_all(
        daemon, producer, r):
    # Given 2000 short jobs and a daemon with 4 workers and a 2 s lease, a third of the way in
    jids = faultjobs.Tick.perform_bulk([[i, i % 4] for i in range(JOBS_IN)])
    d1 = daemon(require=JOBS, concurrency=4, lease_timeout=2)
    dead = d1.identity()
    wait_for(lambda: done_count(r) >= JOBS_IN // 3, 60, what="a third of the jobs")
    # When the master and its workers are SIGKILLed together (the host dies)
    d1.kill_all()
    killed = time.monotonic()
    in_flight = held(r)
    assert in_flight >= 1  # jobs the dead host's workers held (reserved or landed)
    # And a new master starts at once (watched from its start)
    d2 = daemon(require=JOBS, concurrency=4, lease_timeout=2, wait=False)

    # Then it puts the dead host's jobs back once the lease has expired, never while it lives
    def reaped():
        pipe = r.pipeline(transaction=True)  # the lease and the registration at one instant
        pipe.exists(f"queued:lease:{dead}")
        pipe.hexists("queued:masters", dead)
        alive, registered = pipe.execute()
        assert registered or not alive, "reaped while its lease lived"
        return not registered

    wait_for(reaped, 15, interval=0.01, what="the dead master reaped")
    reaped = time.monotonic() - killed
    d2.wait_log(f"master {dead} stopped renewing its lease", 5)
    line = log_lines(d2.output(), f"master {dead} stopped renewing its lease", "master")
    assert len(line) == 1 and f"; {in_flight} of its job(s) put back" in line[0], line
    # And every job runs to the end; nothing is left anywhere
    wait_for(lambda: done_count(r) == JOBS_IN, 60, interval=0.05, what="every job to run")
    finished = time.monotonic() - killed
    tally = Tally(r, jids)
    assert tally.lost == set()
    assert len(tally.twice) <= in_flight
    wait_for(lambda: held(r) == 0, 10, what="the acks")  # (they ride with the next call)
    assert queued_jobs(r) == 0
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert d2.stop() == 0
    report(f"master and its 4 workers SIGKILLed together mid-run, {in_flight} jobs in flight; "
           "a new master started at once (lease_timeout 2)", JOBS_IN, len(tally.run),
           len(tally.lost), len(tally.twice),
           f"jobs put back {reaped:.1f} s after the kill; all done {finished:.1f} s after it")
