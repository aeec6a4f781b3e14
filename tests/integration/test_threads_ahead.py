"""Jobs a worker of many jobs at once holds ahead of its free lanes (dispatch.py): while its
lanes finish jobs fast it reserves a few more, so a lane whose job ends goes on with the next
without a round trip to Redis; held ones go back to the head of their queue once every lane
has stayed busy for EXTRA_HOLD, and never run before the jobs ahead of them (issue 17)."""
import json

import aheadjobs
import jobs
from aheadjobs import ActWhenHeld
from threadjobs import Held

from harness import Monitor, counts, wait_for
from queued import api
from queued.keys import Keys

JOBS = ("jobs.py", "threadjobs.py", "aheadjobs.py")
RESERVED = Keys().reserved("*", "*")  # (a pattern: every slot of every master)
MARKS = ("queued_suspect", "queued_crashes", "retry_count")  # what a run that counted leaves


def _jids_reserved(r, key) -> set:
    return {json.loads(m.split(b"\0", 2)[2])["jid"] for m in r.zrange(key, 0, -1)}


def _all_reserved(r) -> set:
    return {jid for key in r.keys(RESERVED) for jid in _jids_reserved(r, key)}


def _queue(r) -> list[tuple[str, dict]]:
    """The default queue from its tail to its head (the job that runs next is last): each
    job's jid and the marks it carries."""
    return [(m["jid"], {k: m[k] for k in MARKS if k in m})
            for m in map(json.loads, r.lrange("queue:default", 0, -1))]


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
    assert _queue(r) == [(j, {}) for j in reversed(behind)]  # (the first one behind runs next)
    runs = counts(r, jobs.RUNS)
    assert [j for j in behind if j in runs] == []
    assert _jids_reserved(r, reserved) == set(gated)
    assert counts(r, jobs.DONE) == dict.fromkeys(quick, 1)
    jobs.open_gate(r, "ahead")
    wait_for(lambda: len(counts(r, jobs.DONE)) == 68, 20, what="every job done")
    assert counts(r, jobs.DONE) == dict.fromkeys(quick + gated + behind, 1)
    assert counts(r, jobs.RUNS) == dict.fromkeys(quick + gated + behind, 1)
    assert d.stop() == 0
    # (and still once each with the daemon gone: a copy of a held job left in the worker
    # would run just after the others)
    assert counts(r, jobs.RUNS) == dict.fromkeys(quick + gated + behind, 1)
    assert r.llen("queue:default") == 0 and r.keys(RESERVED) == []


def test_no_blocking_fetch_while_jobs_are_held_ahead(daemon, producer, r, redis_url):
    # Given 60 quick jobs, 2 that hold their lane until a gate opens and 6 quick ones behind
    # them, all queued before a process of 2 threads starts (its queue empties only once it
    # holds jobs ahead of its busy lanes), which always wants more jobs ahead than it holds
    # (jobmods/many_ahead.py), and Redis's MONITOR on from before it starts
    monitor = Monitor(redis_url)
    try:
        quick = jobs.Record.perform_bulk([[i] for i in range(60)])
        gated = Held.perform_bulk([["noblock"]] * 2)
        behind = jobs.Record.perform_bulk([[i] for i in range(6)])
        d = daemon(concurrency=1, threads=2, require=JOBS + ("jobmods/many_ahead.py",))
        reserved = Keys().reserved(d.identity(), 0)
        # When it holds the jobs behind ahead of the gated ones (its next reserve call finds
        # the queue empty), then puts them back once both lanes stayed busy (EXTRA_HOLD)
        wait_for(lambda: set(behind) <= _jids_reserved(r, reserved), 10, interval=0.002,
                 what="the jobs behind the gated ones held ahead")
        wait_for(lambda: not _jids_reserved(r, reserved) & set(behind), 10, interval=0.01,
                 what="the held ones gone from the slot")
        # Then it never waited in Redis for work meanwhile (a BLMOVE waiting then would have
        # landed a job put back at once, to wait in the worker behind the gated ones), and
        # the six are all back in their queue, none landed
        assert [cmd for _, cmd in monitor.sync() if cmd.startswith("BLMOVE ")] == []
        assert _queue(r) == [(j, {}) for j in reversed(behind)]
        assert r.keys(Keys().landing("*", "*", "*")) == []
        jobs.open_gate(r, "noblock")
        wait_for(lambda: len(counts(r, jobs.DONE)) == 68, 20, what="every job done")
        assert counts(r, jobs.RUNS) == dict.fromkeys(quick + gated + behind, 1)
        assert d.stop() == 0
    finally:
        monitor.close()


def _queued_before_start(tag: str, steps: list) -> tuple[list, str, str, list]:
    """60 quick jobs, then a job held on the gate ``tag``, then one doing ``steps`` as soon
    as jobs behind it are held ahead of the two busy lanes (aheadjobs.py), then 6 quick jobs
    behind them (first argument "behind"); all pushed before the daemon starts, so the quick
    ones run back to back and the worker holds jobs ahead as it reaches the gated ones."""
    quick = jobs.Record.perform_bulk([[i] for i in range(60)])
    gated = Held.perform_async(tag)
    actor = ActWhenHeld.perform_async(RESERVED, "behind", 2, steps, tag)
    behind = jobs.Record.perform_bulk([["behind", i] for i in range(6)])
    return quick, gated, actor, behind


def test_term_puts_jobs_held_ahead_back_at_once_not_after_the_running_ones(daemon, producer, r):
    # Given one process of 2 threads reaching a gated job and one that sends its master TERM
    # as soon as jobs behind them are held ahead of the two busy lanes
    quick, gated, actor, behind = _queued_before_start("term", [["TERM", "master"]])
    d = daemon(concurrency=1, threads=2, require=JOBS)
    # When TERM comes while the worker holds some of them
    held = wait_for(lambda: r.lrange(aheadjobs.HELD, 0, -1), 20, what="TERM with jobs held")
    assert {j.decode() for j in held} <= set(behind)
    # Then they go back to the head of the queue unrun and unmarked while the two jobs on the
    # lanes still run (their gate is closed): they do not wait for the worker to exit
    wait_for(lambda: r.llen("queue:default") == 6 and _all_reserved(r) == {gated, actor}, 10,
             interval=0.01, what="held ones back, the running ones kept")
    assert counts(r, jobs.DONE) == dict.fromkeys(quick, 1)
    assert [j for j in behind if j in counts(r, jobs.RUNS)] == []
    assert _queue(r) == [(j, {}) for j in reversed(behind)]
    # And once the gate opens the two end there, once, and the daemon exits 0 leaving the six
    # in the queue as they were, none run
    jobs.open_gate(r, "term")
    assert d.wait(30) == 0
    assert counts(r, jobs.DONE) == dict.fromkeys(quick + [gated, actor], 1)
    assert counts(r, jobs.RUNS) == dict.fromkeys(quick + [gated, actor], 1)
    assert _queue(r) == [(j, {}) for j in reversed(behind)]
    assert r.keys(RESERVED) == []


def test_kill_9_with_jobs_held_ahead_marks_only_the_running_ones_suspects(daemon, producer, r):
    # Given one process of 2 threads reaching a gated job and one that, as soon as jobs
    # behind them are held ahead of the two busy lanes, pauses the queue (so the worker that
    # replaces it takes nothing yet) and SIGKILLs its own worker
    quick, gated, actor, behind = _queued_before_start(
        "k9", [["pause", "default"], ["KILL", "self"]])
    d = daemon(concurrency=1, threads=2, require=JOBS)
    # When it does so while the worker holds some of them
    held = wait_for(lambda: r.lrange(aheadjobs.HELD, 0, -1), 20, what="kill -9, jobs held")
    assert {j.decode() for j in held} <= set(behind)
    # Then every job its slot held is back at the head of the queue: the two it was running
    # marked suspects (either may have killed it), the held ones as they were (they were not
    # running: no suspect mark, no crash counted), in the order they were reserved
    wait_for(lambda: r.llen("queue:default") == 8 and r.keys(RESERVED) == [], 10,
             interval=0.01, what="the slot back in the queue")
    assert _queue(r) == [(j, {}) for j in reversed(behind)] + [
        (actor, {"queued_suspect": 1}), (gated, {"queued_suspect": 1})]
    assert [j for j in behind if j in counts(r, jobs.RUNS)] == []
    # And once the queue is unpaused and the gate opens each ends once: the two suspects
    # after a second start (alone), the others started once
    api.Admin(r).queue("default").unpause()
    jobs.open_gate(r, "k9")
    wait_for(lambda: len(counts(r, jobs.DONE)) == 68, 30, what="every job done")
    assert d.stop() == 0
    assert counts(r, jobs.DONE) == dict.fromkeys(quick + [gated, actor] + behind, 1)
    assert counts(r, jobs.RUNS) == {**dict.fromkeys(quick + behind, 1), gated: 2, actor: 2}
    assert r.llen("queue:default") == 0 and r.keys(RESERVED) == []


def test_async_jobs_held_ahead_go_back_to_their_queue_and_run_once(daemon, producer, r):
    # Given one process of 2 lanes running async jobs: 60 quick ones, then 2 that await a
    # gate, then 6 quick ones behind them
    from threadjobs import AsyncCounted, AsyncGateWait
    d = daemon(concurrency=1, threads=2, require=JOBS)
    quick = AsyncCounted.perform_bulk([[0]] * 60)
    gated = AsyncGateWait.perform_bulk([["async-ahead"]] * 2)
    behind = AsyncCounted.perform_bulk([[0]] * 6)
    reserved = Keys().reserved(d.identity(), 0)
    # When the quick ones have run fast (each lane going on with the next held one), the jobs
    # behind the gated ones are held ahead of the two busy lanes
    wait_for(lambda: _jids_reserved(r, reserved) & set(behind), 10, interval=0.002,
             what="an async job behind the gated ones held ahead")
    # Then they go back to the head of the queue unrun, in order and unmarked, and once the
    # gate opens every job runs exactly once
    wait_for(lambda: r.llen("queue:default") == 6, 10, interval=0.01, what="held ones back")
    assert _queue(r) == [(j, {}) for j in reversed(behind)]
    assert [j for j in behind if j in counts(r, jobs.RUNS)] == []
    assert _jids_reserved(r, reserved) == set(gated)
    jobs.open_gate(r, "async-ahead")
    wait_for(lambda: len(counts(r, jobs.DONE)) == 68, 20, what="every job done")
    assert d.stop() == 0
    assert counts(r, jobs.RUNS) == dict.fromkeys(quick + gated + behind, 1)
    assert counts(r, jobs.DONE) == dict.fromkeys(quick + gated + behind, 1)
    assert r.llen("queue:default") == 0 and r.keys(RESERVED) == []
