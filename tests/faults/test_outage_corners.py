"""Things that happen while Redis is away: the daemon is told to stop, a job fails, a worker
dies. Each is settled once Redis is back (or by another master), exactly once: nothing lost,
nothing in two places."""
import os
import signal
import time
from contextlib import contextmanager

import pytest

import queued
from faults import faultjobs
from faults.common import (JOBS, OwnRedis, Tally, client, done_count, held, log_lines, per_jid,
                           queued_jobs, report)

from harness import Daemon, title, wait_for, zjobs

from queued.errors import EXIT_REDIS_ERROR

LEASE = 2


@contextmanager
def own_redis(tmp_path):
    """A persisted (AOF, fsync always) redis-server of the test's own, its client, and a
    maker of daemons on it; all stopped afterwards."""
    server = OwnRedis()
    server.start()
    made = []

    def make(*extra, **settings):
        d = Daemon(server.url, tmp_path, require=JOBS, lease_timeout=LEASE, **settings)
        made.append(d)
        return d.start(*extra)

    try:
        yield server, client(server.url), make
    finally:
        for d in made:
            d.cleanup()
        server.stop()


def push(url, job, *args, **options):
    return queued.Client(url=url).push({"class": job, "args": list(args), **options})


def started(c, jids) -> bool:
    starts = per_jid(c, faultjobs.STARTS)
    return all(starts[j] >= 1 for j in jids)


def blocked(c) -> bool:
    """An idle worker waits in BLMOVE (so the next push lands on it)."""
    return any(x.get("cmd") == "blmove" for x in c.client_list())


def out_for(server, d):
    """Shut Redis down (it writes its data) and wait until the daemon has met the outage."""
    server.shutdown()
    d.wait_log("Redis unreachable", 10)


def test_a_stop_while_redis_is_away_keeps_the_registration_and_a_later_master_recovers(
        tmp_path):
    with own_redis(tmp_path) as (server, c, make):
        # Given a daemon (2 workers, -t 1, 2 s lease) running two long jobs
        d = make("-t", "1", concurrency=2)
        identity = d.identity()
        jids = [push(server.url, faultjobs.HoldOnce, 30, i) for i in range(2)]
        wait_for(lambda: started(c, jids) and held(c) == 2, 10, what="both jobs running")
        # When Redis goes away and the daemon is told to stop meanwhile
        out_for(server, d)
        d.signal(signal.SIGTERM)
        t0 = time.monotonic()
        # Then it stops at the -t deadline (its workers killed), leaving the jobs reserved
        code = d.wait(15)
        took = time.monotonic() - t0
        assert code == EXIT_REDIS_ERROR, code  # the status says: jobs were left reserved
        assert took < 1 + 3, took
        (line,) = log_lines(d.output(), "Redis unreachable: the jobs of 2 worker slot(s) "
                                        "stay reserved", "master")
        # When Redis comes back: the registration is still there, and so are the jobs
        server.start()
        back = time.monotonic()
        assert c.hexists("queued:masters", identity)
        assert held(c) == 2 and queued_jobs(c) == 0
        # Then another master puts them back once the lease has expired, and they run
        d2 = make(concurrency=2)
        d2.wait_log(f"master {identity} stopped renewing its lease; 2 of its job(s) put back",
                    10)
        wait_for(lambda: done_count(c) == 2, 10, what="both jobs to run")
        recovered = time.monotonic() - back
        tally = Tally(c, jids)
        assert tally.lost == set() and tally.twice == set(jids)
        wait_for(lambda: held(c) == 0, 10, what="the acks")  # (they ride with the next call)
        assert queued_jobs(c) == 0
        assert c.zcard("retry") == 0 and c.zcard("dead") == 0
        assert not c.hexists("queued:masters", identity)
        assert "Traceback" not in d.output() + d2.output()
        assert d2.stop() == 0
        report("TERM while Redis is away (2 jobs running, -t 1); Redis back after the daemon "
               "exited; a new master started (lease_timeout 2)", 2, len(tally.run),
               len(tally.lost), f"{len(tally.twice)} (killed at the deadline)",
               f"daemon exited {took:.1f} s after TERM with status {code}, registration and "
               f"both reservations kept; a new master recovered them {recovered:.1f} s after "
               "Redis was back")


@pytest.mark.parametrize("retry,started_how", [(1, "reserved"), (0, "reserved"),
                                               (1, "landed")])
def test_a_job_that_fails_while_redis_is_away_is_recorded_once_when_it_is_back(
        tmp_path, retry, started_how):
    target, other = ("retry", "dead") if retry else ("dead", "retry")
    with own_redis(tmp_path) as (server, c, make):
        # Given a job that fails after 1.5 s, picked up by a reserve call (pushed before the
        # daemon starts) or by an idle worker's blocking fetch (pushed while it waits)
        if started_how == "reserved":
            jid = push(server.url, faultjobs.SlowFail, 1.5, "away", retry=retry)
            d = make(concurrency=1)
        else:
            d = make(concurrency=1)
            wait_for(lambda: blocked(c), 5, what="the worker blocked in BLMOVE")
            jid = push(server.url, faultjobs.SlowFail, 1.5, "away", retry=retry)
        wait_for(lambda: started(c, [jid]), 10, what="the job to start")
        # When Redis goes away before it fails, and comes back a second after the failure
        server.shutdown()
        d.wait_log("fail: RuntimeError: slow failure away", 10)
        wait_for(lambda: log_lines(d.output(), "Redis unreachable", "w0"), 10,
                 what="the worker to meet the outage")
        time.sleep(1.0)  # the outage lasts a second past the failure, by design
        server.start()
        back = time.monotonic()
        # Then the failure is written once: one entry, nothing reserved, queued or elsewhere
        wait_for(lambda: c.zcard(target) == 1, 15, what=f"the {target} entry")
        written = time.monotonic() - back
        assert d.stop() == 0
        (entry,) = zjobs(c, target)
        assert entry["jid"] == jid and entry["retry_count"] == 0
        assert entry["error_message"] == "slow failure away"
        assert c.zcard(other) == 0 and held(c) == 0 and queued_jobs(c) == 0
        assert per_jid(c, faultjobs.STARTS)[jid] == 1  # it did not run again
        report(f"a job fails ({target}) while Redis is away (started by a "
               f"{'reserve call' if started_how == 'reserved' else 'blocking fetch'}); Redis "
               "back 1 s later", 1, f"1, in {target} once", 0, 0,
               f"{target} entry written {written * 1000:.0f} ms after Redis was back")


def busy_worker(d, job_class) -> int:
    """The pid of the daemon's worker whose title names ``job_class``."""
    return wait_for(lambda: next((p for p in d.worker_pids() if job_class in title(p)), None),
                    5, what=f"the worker running {job_class}")


def test_a_worker_that_dies_while_redis_is_away_has_its_slot_recovered_when_it_is_back(
        tmp_path):
    with own_redis(tmp_path) as (server, c, make):
        # Given a daemon with 2 workers, one of them running a long job
        d = make(concurrency=2)
        jid = push(server.url, faultjobs.HoldOnce, 30, "dies")
        wait_for(lambda: started(c, [jid]), 10, what="the job to start")
        victim = busy_worker(d, "HoldOnce")
        # When Redis goes away and that worker is SIGKILLed meanwhile
        out_for(server, d)
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: victim not in d.worker_pids(), 5, what="the worker reaped")
        # Then nothing can be put back yet, and the slot is not reused while it holds the job
        assert len(d.worker_pids()) == 1
        # When Redis comes back
        server.start()
        back = time.monotonic()
        # Then the master puts the job back, counts the crash, and the job runs to the end
        d.wait_log("died (killed by SIGKILL (out of memory?)); 1 job(s) put back", 10)
        wait_for(lambda: done_count(c) == 1, 10, what="the job to run again")
        recovered = time.monotonic() - back
        tally = Tally(c, [jid])
        assert tally.lost == set() and tally.twice == {jid}
        assert log_lines(d.output(), f"jid={jid} killed its worker (killed by SIGKILL "
                                     "(out of memory?)), crash 1 of 3", "master")
        assert len(d.wait_up()) == 2  # the slot's new worker
        wait_for(lambda: held(c) == 0, 10, what="the ack")  # (it rides with the next call)
        assert queued_jobs(c) == 0
        assert c.zcard("retry") == 0 and c.zcard("dead") == 0
        assert "Traceback" not in d.output()
        assert d.stop() == 0
        report("a worker SIGKILLed while Redis is away, running a job; Redis back after its "
               "master reaped it",
               1, 1, 0, "1 (the killed run)",
               f"job put back and its slot refilled when Redis was back; done "
               f"{recovered * 1000:.0f} ms after")
