"""A large backlog of due jobs does not freeze the master: the scheduler moves it in slices and
the loop keeps renewing the lease, reaping and enforcing timeouts in between. (Moving all of it
in one go, ~43,000 jobs/s here, froze the loop for seconds: with 200,000 due jobs and a 2 s
lease, another master took back the leader's running jobs, which ran twice.)"""
import json
import time

import jobs
from faults.common import report

from harness import counts, wait_for

BACKLOG = 200_000


def due_members(n: int) -> dict[bytes, float]:
    past = time.time() - 60
    return {json.dumps({"class": "Elsewhere", "args": [], "jid": f"{i:024x}",
                        "queue": "elsewhere"}, separators=(",", ":")).encode(): past
            for i in range(n)}


def test_a_due_backlog_is_moved_while_the_master_keeps_its_lease(daemon, producer, r):
    # Given the scheduler leader running two jobs, and a second master beside it, 2 s leases
    backlog = due_members(BACKLOG)
    # (a 1 s heartbeat: the leadership, 3 beats long, outlives a lapsed 2 s lease, so the other
    # master cannot take over the scheduling, and freeze too, before it could reap)
    d1 = daemon(concurrency=2, lease_timeout=2, heartbeat_interval=1)
    d1.wait_log("this master now runs the scheduler", 10)
    running = [jobs.Sleep.perform_async(6, i) for i in range(2)]
    wait_for(lambda: all(j in counts(r, jobs.RUNS) for j in running), 10, what="jobs start")
    # (the second one never polls the schedule itself: while it moved part of the backlog
    # its own loop froze too, and it could not reap anybody)
    d2 = daemon(concurrency=2, lease_timeout=2, poll_interval_average=3600)
    # When 200,000 jobs (for a queue nobody here serves) fall due at once
    r.zadd("schedule", backlog)
    t0 = time.monotonic()
    wait_for(lambda: r.zcard("schedule") == 0, 60, what="the backlog moved")
    took = time.monotonic() - t0
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in running), 10,
             what="the running jobs to finish")
    # Then every due job is in its queue, once, and the running jobs ran once: the leader
    # kept its lease, so the other master never took them back
    assert r.llen("queue:elsewhere") == BACKLOG
    assert all(counts(r, jobs.RUNS)[j] == 1 for j in running)
    assert "stopped renewing its lease" not in d2.output()
    assert d1.stop() == 0 and d2.stop() == 0
    report(f"{BACKLOG:,} jobs fall due at once while the leader runs 2 jobs (lease 2 s, "
           "second master beside it)", 2, 2, 0, 0,
           f"moved in slices in {took:.1f}s; lease kept, nothing reaped")
