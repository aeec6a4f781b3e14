"""``async def perform`` jobs, as tasks on their worker's one event loop, in real daemons: each
exactly once, each with its time limit (a cancellation), mixed with sync jobs within
``threads``, a loop blocked by one job named and that job alone charged (issue 17)."""
import json

import jobs
import pytest
import threadjobs
from threadjobs import (AsyncBlocksLoop, AsyncBlocksThenOpens, AsyncCounted, AsyncDropsACancel,
                        AsyncGateWait, AsyncHoldsLoop, AsyncIgnoresCancel, AsyncNap, AsyncStuck,
                        Counted)

from ctlrun import ctl
from harness import counts, wait_for, zjobs

JOBS = ("jobs.py", "threadjobs.py")


def runs(r):
    return counts(r, jobs.RUNS)


def done(r):
    return counts(r, jobs.DONE)


@pytest.mark.parametrize("threads", [1, 20])
def test_async_jobs_run_exactly_once_on_the_loop(daemon, producer, r, threads):
    # Given workers of one job at a time, or of 20
    d = daemon(concurrency=2, threads=threads, require=JOBS)
    # When async jobs (a class and an @queued.job function) are pushed
    jids = AsyncNap.perform_bulk([[0.01] for _ in range(200)])
    fn = [threadjobs.async_function.perform_async("t:fn", i) for i in range(20)]
    # Then each ran once, to its end
    wait_for(lambda: len(done(r)) == 200, 30, what="200 async jobs done")
    assert runs(r) == dict.fromkeys(jids, 1) and done(r) == dict.fromkeys(jids, 1)
    wait_for(lambda: r.llen("t:fn") == 20, 10, what="the function jobs")
    assert sorted(int(x) for x in r.lrange("t:fn", 0, -1)) == list(range(20))
    wait_for(lambda: int(r.get("stat:processed") or 0) == 220, 10, what="the stats")
    assert int(r.get("stat:failed") or 0) == 0 and len(fn) == 20
    # And on the loop of their process: the worker's own in its main thread when it runs one
    # job at a time, else the pool's queued-loop thread; one loop per process for all its jobs
    where = [v.decode().split("|") for v in r.hgetall(threadjobs.LOOPS).values()]
    assert len(where) == 200
    assert {name for _, name, _ in where} == {"MainThread" if threads == 1 else "queued-loop"}
    loops = {}
    for pid, _, loop in where:
        loops.setdefault(pid, set()).add(loop)
    assert all(len(ids) == 1 for ids in loops.values()), loops
    assert d.stop() == 0


@pytest.mark.parametrize("threads", [1, 4])
def test_an_async_job_past_its_timeout_is_cancelled(daemon, producer, r, threads):
    d = daemon(concurrency=1, threads=threads, require=JOBS)
    (worker,) = d.worker_pids()
    # When an async job awaits far past its 0.5 s limit
    jid = AsyncStuck.perform_async(60)
    # Then it is cancelled: its cleanup (finally) runs, and it fails with JobTimeout (retry 0:
    # to dead), its process alive and serving
    (entry,) = wait_for(lambda: zjobs(r, "dead"), 10, what="the job in dead")
    assert entry["jid"] == jid and entry["error_class"] == "JobTimeout"
    assert "0.5s timeout and was cancelled" in entry["error_message"]
    assert r.lrange(threadjobs.CLEANUP, 0, -1) == [jid.encode()]
    nxt = jobs.Record.perform_async("next")
    wait_for(lambda: done(r).get(nxt) == 1, 10, what="the next job")
    assert d.worker_pids() == [worker] and "killing it" not in d.output()
    assert d.stop() == 0


@pytest.mark.parametrize("threads", [1, 4])
def test_an_async_job_that_loses_its_cancel_is_cancelled_again(daemon, producer, r, threads):
    # Given a worker, and an async job that loses the first cancel of its 0.5 s limit (rt2
    # finding 1: redis-py drops one that races a command; the master then killed the process)
    d = daemon(concurrency=1, threads=threads, require=JOBS)
    (worker,) = d.worker_pids()
    jid = AsyncDropsACancel.perform_async(60)
    # Then it is cancelled again before the master's kill: it fails with JobTimeout (to dead,
    # retry 0), and its process lives on
    (entry,) = wait_for(lambda: zjobs(r, "dead"), 10, what="the job in dead")
    assert entry["jid"] == jid and entry["error_class"] == "JobTimeout"
    assert "0.5s timeout and was cancelled" in entry["error_message"]
    assert r.lrange(threadjobs.CLEANUP, 0, -1) == [f"{jid} dropped".encode()]
    nxt = jobs.Record.perform_async("next")
    wait_for(lambda: done(r).get(nxt) == 1, 10, what="the next job")
    assert d.worker_pids() == [worker] and "killing it" not in d.output()
    assert d.stop() == 0


def test_an_async_job_ignoring_its_cancels_is_reported_where_it_awaits(daemon, producer, r):
    # Given a worker of 4 lanes, and an async job that swallows every cancel of its limit
    d = daemon(concurrency=1, threads=4, timeout_grace=3, require=JOBS)
    jid = AsyncIgnoresCancel.perform_async(60)
    # Then the watchdog's report shows the job's own frames where it awaits (rt2 finding 1:
    # it showed the loop thread, idle in select), before the master's kill
    out = d.wait_log(f"AsyncIgnoresCancel jid={jid} is still running", 10)
    report = out[out.index(f"jid={jid} is still running"):]
    assert "cancelled again until it ends; where it awaits (innermost last):" in report
    assert "in perform\n    await asyncio.sleep(0.05)  # (awaits here)" in report
    (entry,) = wait_for(lambda: zjobs(r, "dead"), 15, what="the job in dead")
    assert entry["jid"] == jid and entry["error_class"] == "JobTimeout"
    assert d.stop() == 0


def test_1000_sleeping_async_jobs_in_one_process_each_with_its_timeout(daemon, producer, r):
    # Given one process that runs 1,000 jobs at once
    d = daemon(concurrency=1, threads=1000, require=JOBS)
    (worker,) = d.worker_pids()
    # When 1,000 async jobs that would sleep 120 s, with a 15 s limit each, are pushed
    jids = AsyncStuck.set(timeout=15).perform_bulk([[120]] * 1000)
    # Then all 1,000 are in flight at once, in that one process: the last started before the
    # first one's limit was up (as the jobs' own start times say, however slowly they started)
    wait_for(lambda: len(runs(r)) == 1000, 30, what="1,000 started")
    wait_for(lambda: r.llen(threadjobs.STARTS) == 1000, 10, what="1,000 start times")
    starts = [float(v.split()[1]) for v in r.lrange(threadjobs.STARTS, 0, -1)]
    assert max(starts) - min(starts) < 15
    # And each is cancelled at its limit: all in dead with JobTimeout, long before their 120 s
    # (the waits' bounds add up to 100 s), in the same process
    wait_for(lambda: r.zcard("dead") == 1000, 60, what="1,000 cancelled")
    dead = zjobs(r, "dead")
    assert sorted(e["jid"] for e in dead) == sorted(jids)
    assert {e["error_class"] for e in dead} == {"JobTimeout"}
    assert r.llen(threadjobs.CLEANUP) == 1000
    assert d.worker_pids() == [worker] and "killing it" not in d.output()
    assert d.stop() == 0


def test_sync_and_async_jobs_share_one_process_within_threads(daemon, producer, r):
    # Given one process of 6 threads
    d = daemon(concurrency=1, threads=6, require=JOBS)
    # When sync and async jobs that each count how many run at once are pushed together
    sync = Counted.perform_bulk([[0.3]] * 12)
    asyn = AsyncCounted.perform_bulk([[0.3]] * 12)
    wait_for(lambda: len(done(r)) == 24, 30, what="every job done")
    # Then both kinds ran there, many at once, never more than 6
    assert runs(r) == dict.fromkeys(sync + asyn, 1)
    assert 1 < int(r.get("t:most")) <= 6
    assert d.stop() == 0


def test_a_job_that_blocks_the_loop_is_named_and_alone_charged(daemon, producer, r):
    # Given one process of 8 threads running async jobs with a 0.4 s limit, and a 4 s grace
    d = daemon(concurrency=1, threads=8, timeout_grace=4, require=JOBS)
    (worker,) = d.worker_pids()
    victims = AsyncNap.set(timeout=0.4, retry=3).perform_bulk([[0.2]] * 5)
    # When an async job blocks the loop (time.sleep inside async def) past its own limit
    culprit = AsyncBlocksLoop.perform_async(60)
    # Then the worker names the stuck loop and the job in it, before the master acts: in its
    # log, and in what queuedctl processes shows
    d.wait_log("the event loop has not run for", 10)
    assert f"job {culprit} holds it" in d.output()
    shown = wait_for(lambda: [line for line in ctl("processes", url=d.redis_url).stderr
                              .splitlines() if "its event loop has not run" in line], 5,
                     what="queuedctl processes naming the stuck loop")
    assert f"stuck in job {culprit}" in shown[0]
    # And the master kills the process and charges that job alone (its retry); the others,
    # past their limits only because the loop was stuck, go back as they were and end once
    (entry,) = wait_for(lambda: zjobs(r, "retry"), 15, what="the culprit's retry")
    assert entry["jid"] == culprit and entry["error_class"] == "JobTimeout"
    wait_for(lambda: all(done(r).get(j) == 1 for j in victims), 20, what="victims done")
    assert r.zcard("retry") == 1 and r.zcard("dead") == 0
    assert d.worker_pids() != [worker]
    assert d.stop() == 0


def test_async_jobs_waiting_on_a_blocked_loop_are_counted_and_shown(daemon, producer, r):
    # Given one process of 8 lanes whose event loop a job holds (no limit, until its gate)
    d = daemon(concurrency=1, threads=8, require=JOBS)
    holder = AsyncHoldsLoop.perform_async("loop")
    wait_for(lambda: holder in runs(r), 10, what="the loop held")
    # When 4 more async jobs are handed to that loop (they cannot start)
    waiting = AsyncNap.perform_bulk([[0.01]] * 4)
    wait_for(lambda: r.llen("queue:default") == 0, 10, what="the 4 taken")
    # Then the process's beat counts all 5 busy, and its workers hash shows each of them, its
    # own payload (rt2 finding 6: 1 busy, 1 row; 4 reserved jobs nowhere to be seen)
    (identity,) = [m.decode() for m in r.smembers("processes")]
    wait_for(lambda: r.hget(identity, "busy") == b"5", 10, what="5 busy in the beat")
    shown = {json.loads(json.loads(v)["payload"])["jid"]
             for v in r.hgetall(f"{identity}:workers").values()}
    assert shown == {holder, *waiting}
    # And once the loop is free they all run, once each
    jobs.open_gate(r, "loop")
    wait_for(lambda: all(done(r).get(j) == 1 for j in [holder, *waiting]), 10, what="all done")
    assert d.stop() == 0


def test_async_jobs_that_only_waited_on_a_held_loop_are_not_charged(daemon, producer, r):
    # Given one process of 6 lanes running 4 async jobs of 2 s limits, each awaiting a gate
    d = daemon(concurrency=1, threads=6, require=JOBS)
    waiters = AsyncGateWait.perform_bulk([["held"]] * 4)
    wait_for(lambda: all(j in runs(r) for j in waiters), 10, what="4 jobs awaiting")
    # When a job without a limit blocks their event loop 4 s, then opens their gate
    holder = AsyncBlocksThenOpens.perform_async(4, "held")
    # Then they end as the loop comes back, none cancelled: they could not run for those 4 s
    # (rt2 finding 4: each got JobTimeout, the blocker nothing)
    wait_for(lambda: all(done(r).get(j) == 1 for j in [*waiters, holder]), 20,
             what="all done")
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    # And each ran once (a cancelled run retried would end too), and no cancel was made (one
    # a library lost would let it end as if uncharged)
    assert {j: runs(r).get(j) for j in waiters} == {j: 1 for j in waiters}
    assert counts(r, threadjobs.CANCELS) == {j: 0 for j in waiters}
    assert d.stop() == 0


def _fails_once_counted_with_its_lane_free(daemon, r, job_class) -> None:
    """One ``job_class`` job on a process of 2 lanes, quick to beat: it is in dead once with
    its own error, counted as processed and failed, and its process beats with nothing busy
    and no row in its workers hash."""
    d = daemon(concurrency=1, threads=2, heartbeat_interval=0.5, require=JOBS)
    jid = job_class.perform_async()
    wait_for(lambda: len(zjobs(r, "dead")) == 1, 10, what="the job in dead")
    (entry,) = zjobs(r, "dead")
    assert (entry["jid"], entry["error_class"]) == (jid, "ValueError")
    wait_for(lambda: int(r.get("stat:failed") or 0) == 1, 10, what="the failure counted")
    assert int(r.get("stat:processed") or 0) == 1
    (identity,) = [m.decode() for m in r.smembers("processes")]
    wait_for(lambda: r.hget(identity, "busy") == b"0", 10, what="nothing busy in the beat")
    assert r.hgetall(f"{identity}:workers") == {}
    assert runs(r) == {jid: 1}
    assert d.stop() == 0


def test_an_async_job_failing_with_a_cancel_pending_on_its_task_ends_counted_and_frees_its_lane(
        daemon, producer, r):
    # An async job that cancels its own task, swallows it, cancels it again and fails (RT7:
    # the cancel hit the write of its end: not counted, its lane shown busy for ever)
    _fails_once_counted_with_its_lane_free(daemon, r, threadjobs.AsyncCancelsItself)


def test_an_async_job_whose_async_hook_is_cancelled_ends_counted_and_frees_its_lane(
        daemon, producer, r):
    # An async job that fails and whose async after_failed hook is cancelled inside (the
    # hook's await raised CancelledError past `except Exception`: its end was written, but
    # not counted, and its lane shown busy)
    _fails_once_counted_with_its_lane_free(daemon, r, threadjobs.AsyncHookCancelsItself)
