"""Jobs a worker of many jobs at once holds ahead of its free lanes (dispatch.py): while its
lanes finish jobs fast it reserves a few more, so a lane whose job ends goes on with the next
without a round trip to Redis; held ones go back to the head of their queue once every lane
has stayed busy for EXTRA_HOLD, and never run before the jobs ahead of them (issue 17)."""
import json

import jobs
from threadjobs import Held

from harness import counts, wait_for
from queued.keys import Keys

JOBS = ("jobs.py", "threadjobs.py")


def _jids_reserved(r, key) -> set:
    return {json.loads(m.split(b"\0", 2)[2])["jid"] for m in r.zrange(key, 0, -1)}


def test_jobs_held_ahead_of_busy_lanes_go_back_to_their_queue_and_run_once(daemon, producer, r):
    # Given one process of 2 threads, and in its queue 60 quick jobs, then 2 that hold their
    # lane until a gate opens, then 6 quick jobs behind them
    d = daemon(concurrency=1, threads=2, require=JOBS)
    quick = jobs.Record.perform_bulk([[i] for i in range(60)])
    gated = Held.perform_bulk([["ahead"]] * 2)
    behind = jobs.Record.perform_bulk([[i] for i in range(6)])
    reserved = Keys().reserved(d.identity(), 0)
    # When the quick jobs have run fast, the worker reserves the jobs behind the gated ones
    # ahead of its lanes (both busy with the gated jobs now)
    wait_for(lambda: _jids_reserved(r, reserved) & set(behind), 10, interval=0.002,
             what="a job behind the gated ones held ahead")
    # Then, as both lanes stay busy, they go back to the head of the queue unrun, the slot
    # keeps only the running jobs, and once the gate opens every job runs exactly once
    wait_for(lambda: r.llen("queue:default") == 6, 10, interval=0.01, what="held ones back")
    runs = counts(r, jobs.RUNS)
    assert [j for j in behind if j in runs] == []
    assert _jids_reserved(r, reserved) == set(gated)
    assert counts(r, jobs.DONE) == dict.fromkeys(quick, 1)
    jobs.open_gate(r, "ahead")
    wait_for(lambda: len(counts(r, jobs.DONE)) == 68, 20, what="every job done")
    assert counts(r, jobs.DONE) == dict.fromkeys(quick + gated + behind, 1)
    assert counts(r, jobs.RUNS) == dict.fromkeys(quick + gated + behind, 1)
    assert d.stop() == 0
