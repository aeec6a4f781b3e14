"""A queue key of the wrong Redis type (SET queue:broken x): reported once, skipped while the
other queues run, served again once fixed; a job that must go back to it (recovery) or be
moved to it (the scheduler) goes to dead instead of failing for ever."""
import json
import os
import signal
import time

from faults import faultjobs
from faults.common import (JOBS, Tally, all_workers, done_count, held, log_lines, per_jid,
                           queued_jobs, report)

from harness import title, wait_for

BROKEN = "holds another Redis type, not a list (WRONGTYPE)"


def blocking_fetches(r) -> int:
    """BLMOVE calls since the last CONFIG RESETSTAT (failed ones included)."""
    return r.info("commandstats").get("cmdstat_blmove", {}).get("calls", 0)


def test_a_queue_key_of_the_wrong_type_is_reported_once_and_skipped(daemon, producer, r):
    # Given queue:broken overwritten with a string, and a daemon serving [broken, default]
    # with 2 workers (worker 0 blocks on broken, worker 1 on default)
    r.set("queue:broken", "x")
    d = daemon(require=JOBS, concurrency=2, queues=["broken", "default"])
    workers = all_workers(d, 2)
    # When jobs are pushed to default
    t0 = time.monotonic()
    jids = faultjobs.Tick.perform_bulk([[i, 1] for i in range(500)])
    # Then they all run, and the broken queue is reported once for the whole daemon
    wait_for(lambda: done_count(r) == len(jids), 30, what="the default jobs")
    took = time.monotonic() - t0
    d.wait_log(BROKEN, 5)
    # When the daemon is idle (both workers say so), count its blocking fetches for 2 s
    wait_for(lambda: all(title(p).endswith(": idle") for p in workers), what="idle workers")
    r.config_resetstat()
    time.sleep(2)  # the measuring window: the broken queue's worker naps, it does not spin
    calls = blocking_fetches(r)
    out = d.output()
    lines = log_lines(out, BROKEN)
    assert len(lines) == 1, lines
    assert "queue broken: key queue:broken holds another Redis type" in lines[0]
    assert 1 <= calls <= 10, calls  # one per block timeout (1 s) per worker, not a busy loop
    # And no worker crashed or was replaced
    assert set(d.worker_pids()) == workers
    assert "crashed" not in out and "Traceback" not in out
    assert r.get("queue:broken") == b"x"  # never touched
    # When the key is fixed, jobs pushed to it run
    r.delete("queue:broken")
    fixed = faultjobs.Tick.set(queue="broken").perform_bulk([[i] for i in range(50)])
    wait_for(lambda: done_count(r) == len(jids) + len(fixed), 15, what="the broken queue's jobs")
    d.wait_log("queue broken: key queue:broken is a list again; serving it", 5)
    tally = Tally(r, jids + fixed)
    assert tally.lost == set() and tally.twice == set()
    assert len(log_lines(d.output(), BROKEN)) == 1
    assert queued_jobs(r) == 0 and r.zcard("dead") == 0 and r.zcard("retry") == 0
    wait_for(lambda: held(r) == 0, 5, what="no job held")
    assert d.stop() == 0
    report("queue:broken is a string (SET); daemon serves [broken, default] with 2 workers; "
           "500 jobs to default, then DEL queue:broken and 50 jobs to it", len(jids) + 50,
           len(tally.run), len(tally.lost), len(tally.twice),
           f"default served throughout ({took:.1f} s for 500); reported in 1 log line; "
           f"{calls} blocking fetches in 2 s idle (no spinning); served again once fixed")


def test_a_job_whose_queue_key_turned_wrong_type_goes_to_dead_when_its_worker_dies(
        daemon, producer, r):
    # Given one worker running a long job taken from "broken", and jobs waiting in default
    d = daemon(require=JOBS, concurrency=1, queues=["broken", "default"])
    victim = faultjobs.Tick.set(queue="broken").perform_async(0, 60_000)
    wait_for(lambda: per_jid(r, faultjobs.STARTS)[victim] == 1, 10, what="the long job")
    (worker,) = d.worker_pids()
    jids = faultjobs.Tick.perform_bulk([[i] for i in range(100)])
    # When queue:broken is overwritten with a string and the worker is SIGKILLed
    r.set("queue:broken", "x")
    os.kill(worker, signal.SIGKILL)
    killed = time.monotonic()
    # Then the job, which cannot be put back, is in dead as it was, the log says so
    (member,) = wait_for(lambda: r.zrange("dead", 0, -1), 10, what="the job in dead")
    in_dead = time.monotonic() - killed
    assert json.loads(member)["jid"] == victim
    d.wait_log("1 job(s) of", 5)
    assert len(log_lines(d.output(), "could not be put back: their queue key holds another "
                                     "Redis type, not a list (WRONGTYPE); sent to dead")) == 1
    # And the slot is reused: a new worker serves default
    wait_for(lambda: done_count(r) == len(jids), 15, what="the default jobs")
    assert d.worker_pids() and d.worker_pids() != [worker]
    tally = Tally(r, jids)
    assert tally.lost == set() and tally.twice == set()
    wait_for(lambda: held(r) == 0, 5, what="no job held")
    assert d.stop() == 0
    report("a running job's queue key overwritten with a string, then its worker SIGKILLed "
           "(the requeue cannot push it back); 100 jobs waiting in default", 101,
           f"{len(tally.run)}; the requeued one in dead", len(tally.lost), len(tally.twice),
           f"in dead {in_dead * 1000:.0f} ms after the kill; the slot reused at once")


def test_a_due_job_for_a_queue_key_of_the_wrong_type_goes_to_dead(daemon, producer, r):
    # Given queue:broken overwritten with a string
    r.set("queue:broken", "x")
    d = daemon(require=JOBS, concurrency=2)
    # When jobs for broken and for default fall due
    at = time.time() + 0.5
    bad = faultjobs.Tick.set(queue="broken").perform_at(at, "late")
    good = [faultjobs.Tick.perform_at(at, i) for i in range(20)]
    later = [faultjobs.Tick.perform_at(at + 0.5, i) for i in range(20)]
    # Then the scheduler moves the good ones, sends the other to dead, and keeps going
    (member,) = wait_for(lambda: r.zrange("dead", 0, -1), 10, what="the job in dead")
    assert json.loads(member)["jid"] == bad and "enqueued_at" in json.loads(member)
    wait_for(lambda: done_count(r) == len(good + later), 10, what="the due jobs")
    assert r.zcard("schedule") == 0
    lines = log_lines(d.output(), "could not be pushed to queue broken: its key queue:broken "
                                  "holds another Redis type")
    assert len(lines) == 1
    tally = Tally(r, good + later)
    assert tally.lost == set() and tally.twice == set()
    assert "Traceback" not in d.output()
    assert d.stop() == 0
    report("a scheduled job falls due for queue:broken (a string), among 40 others",
           41, f"{len(tally.run)}; the broken queue's one in dead", len(tally.lost),
           len(tally.twice), "at its due time; the scheduler carried on")
