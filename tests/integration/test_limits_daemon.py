"""Rate limiters with real daemons (issue 21): a concurrent limiter is global across processes
and masters; OverLimit out of a job reschedules it (no failure, counted), woken when its limiter
has room rather than after Sidekiq's minutes of backoff; past its reschedules it is a failure."""
import json
import os
import subprocess
import sys
import time

import pytest

import limitjobs as lj
from conftest import ROOT
from harness import counts, wait_for, zjobs
from queued.keys import Keys

REQUIRE = ("limitjobs.py",)
K = Keys()


def most_inside(events: list[bytes]) -> int:
    """The most jobs inside at once, walking the enter/exit records in Redis's order."""
    inside = peak = 0
    for e in events:
        inside += 1 if e.startswith(b"enter ") else -1
        peak = max(peak, inside)
    return peak


@pytest.mark.parametrize("threads, job", [(1, lj.InsideThree), (4, lj.InsideThree),
                                          (4, lj.InsideThreeAsync)])
def test_a_concurrent_limiter_of_3_over_2_masters_never_lets_a_4th_in(daemon, producer, r,
                                                                       threads, job):
    # Given two masters of 3 worker processes (or 1 of 4 threads) each, 6 or 8 jobs at once,
    # and 18 jobs that each hold one unit of a limiter of 3 for 0.2 s (sync jobs in threads,
    # or async def jobs on each process's event loop: async with)
    shape = {"concurrency": 3} if threads == 1 else {"concurrency": 1, "threads": threads}
    d1 = daemon(**shape, require=REQUIRE)
    d2 = daemon(**shape, require=REQUIRE)
    jids = [job.perform_async(0.2) for _ in range(18)]
    wait_for(lambda: len(counts(r, lj.DONE)) == 18, 30, what="every job to end")
    # Then at most 3 were ever inside at once, and 3 were (the limit was reached, not
    # merely unapproached): by the count each job read as it entered, and by the order of
    # the entries and exits Redis recorded
    levels = [int(x) for x in r.lrange(lj.LEVELS, 0, -1)]
    assert len(levels) == 18 and max(levels) == 3
    assert most_inside(r.lrange(lj.EVENTS, 0, -1)) == 3
    assert set(counts(r, lj.DONE)) == set(jids)
    # Every unit came back; the limiter counted 18 grants, some of them after a wait
    assert r.zcard(K.limiter("three", "leases")) == 0
    stats = {k.decode(): int(v) for k, v in r.hgetall(K.limiter("three")).items()
             if k != b"def"}
    assert stats["held"] + stats["waited"] == 18 and stats["waited"] > 0
    assert "overlimit" not in stats
    assert d1.stop() == 0 and d2.stop() == 0


def test_overlimit_reschedules_without_a_failure_and_a_release_wakes_it(daemon, producer, r):
    # Given a job holding the only unit of a limiter, and one that wants it without waiting
    d = daemon(concurrency=2, require=REQUIRE)
    holder = lj.HoldsNever.perform_async("n1")
    wait_for(lambda: counts(r, lj.RUNS).get(holder) == 1, 10, what="the holder to start")
    wanting = lj.WantsNever.perform_async("w1")
    # When it runs: OverLimit. It is rescheduled, not failed: in schedule, overrated 1, no
    # retry, no failure counted, its limiter's and the cluster's counts say so, and it is
    # parked on the limiter
    wait_for(lambda: r.zcard(K.limiter("never", "parked")) == 1, 10,
             what="the over-limit job put off and parked")
    (parked,) = zjobs(r, "schedule")
    ((member, at),) = r.zrange("schedule", 0, -1, withscores=True)
    assert parked["jid"] == wanting and parked["overrated"] == 1
    # its latest time: when the holder's lease ends (lock_timeout 60 s, a crashed holder's
    # unit comes back then), before Sidekiq's backoff (300 * 1 + rand(300) + 1 s)
    lease_end = r.zrange(K.limiter("never", "leases"), 0, 0, withscores=True)[0][1]
    assert lease_end + 0.01 <= at <= lease_end + 0.01 + 0.05
    assert r.zrange(K.limiter("never", "parked"), 0, -1) == [member]
    assert (r.zcard("retry"), r.zcard("dead")) == (0, 0)
    assert int(r.get(K.counter("overlimit"))) == 1
    assert int(r.hget(K.limiter("never"), "rescheduled")) == 1
    assert int(r.hget(K.limiter("never"), "overlimit")) == 1
    wait_for(lambda: int(r.get("stat:processed") or 0) >= 1, 5, what="the stats flushed")
    assert int(r.get("stat:failed") or 0) == 0
    # When the holder gives its unit back, the parked job is woken at once (not minutes later)
    r.set(lj.GATE + "n1", 1)
    wait_for(lambda: counts(r, lj.DONE).get(wanting) == 1, 10, what="the parked job to run")
    assert r.lrange("t:granted", 0, -1) == [b"w1"]
    assert counts(r, lj.RUNS)[wanting] == 2
    assert r.zcard(K.limiter("never", "parked")) == 0
    assert int(r.get("stat:failed") or 0) == 0
    assert d.stop() == 0


def test_a_holder_killed_with_its_unit_wakes_a_parked_job_once_its_lease_ends(
        daemon, producer, r, redis_url):
    # Given a process that took the one unit of a limiter (lock_timeout 2 s) and was killed
    # with it (kill -9: it never gives it back), and no other traffic on the limiter
    d = daemon(concurrency=1, require=REQUIRE)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import limitjobs, time; limitjobs.BRIEF.acquire(); "
                               "print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, env={**os.environ, "REDIS_URL": redis_url,
                                     "PYTHONPATH": os.pathsep.join((here, ROOT))})
    assert holder.stdout.readline() == b"held\n"
    ((_, lease_end),) = r.zrange(K.limiter("brief", "leases"), 0, -1, withscores=True)
    holder.kill()
    holder.wait(10)
    # When a job wants the unit without waiting: OverLimit, rescheduled and parked
    wanting = lj.WantsBrief.perform_async("b1")
    wait_for(lambda: r.zcard(K.limiter("brief", "parked")) == 1, 10, what="the job parked")
    # Then it is due when the dead holder's lease ends, not after its backoff of 301 s or
    # more (the entry is gone already if that time has come: it left for its queue)
    for _, at in r.zrange("schedule", 0, -1, withscores=True):
        assert lease_end + 0.01 <= at <= lease_end + 0.01 + 0.05
    # and it runs then (its own run takes the unit back): nothing else touches the limiter
    wait_for(lambda: counts(r, lj.DONE).get(wanting) == 1, 30, what="the parked job to run")
    assert counts(r, lj.RUNS)[wanting] == 2
    assert r.lrange("t:granted", 0, -1) == [b"b1"]
    assert int(r.hget(K.limiter("brief"), "reclaimed")) == 1
    assert (r.zcard("schedule"), r.zcard("retry"), r.zcard("dead")) == (0, 0, 0)
    assert d.stop() == 0


def test_past_its_reschedules_an_overlimit_job_takes_the_retry_path(daemon, producer, r):
    # Given the holder again, and a job already rescheduled twice (the limiter allows 2)
    d = daemon(concurrency=2, require=REQUIRE)
    holder = lj.HoldsNever.perform_async("n2")
    wait_for(lambda: counts(r, lj.RUNS).get(holder) == 1, 10, what="the holder to start")
    producer.push_raw("default", json.dumps({
        "class": "WantsNever", "args": ["w2"], "queue": "default", "retry": 0,
        "jid": "c" * 24, "overrated": 2, "created_at": time.time(),
        "enqueued_at": time.time()}))
    # Then its third OverLimit is a failure: retry 0 sends it to dead, with the error
    (dead,) = wait_for(lambda: zjobs(r, "dead"), 10, what="the job in dead")
    assert (dead["jid"], dead["error_class"], dead["overrated"]) == ("c" * 24, "OverLimit", 2)
    assert r.zcard("schedule") == 0 and r.get(K.counter("overlimit")) is None
    wait_for(lambda: int(r.get("stat:failed") or 0) == 1, 5, what="the failure counted")
    r.set(lj.GATE + "n2", 1)
    assert d.stop() == 0


def test_bucket_overlimit_jobs_are_woken_as_the_buckets_turn_at_its_rate(
        daemon, producer, r):
    # Given a bucket of 2 per second with no waiting, and 6 jobs wanting a unit at once
    d = daemon(concurrency=3, require=REQUIRE)
    jids = [lj.PerSecond.perform_async(f"p{i}") for i in range(6)]
    wait_for(lambda: len(counts(r, lj.DONE)) == 6, 20, what="every job to get a unit")
    # Then every job got its unit within a few seconds (each over-limit one woken for a
    # later bucket, not after 5 minutes), no calendar second granted more than 2, and
    # nothing failed
    grants = [float(g.split()[1]) for g in r.lrange("t:granted", 0, -1)]
    per_second = {}
    for t in grants:
        per_second[int(t)] = per_second.get(int(t), 0) + 1
    assert len(grants) == 6 and max(per_second.values()) == 2
    assert max(grants) - min(grants) < 6
    assert set(counts(r, lj.DONE)) == set(jids)
    assert (r.zcard("retry"), r.zcard("dead")) == (0, 0)
    # and every refusal was counted: each run that found the bucket full is one over-limit
    # (how many depends on when the workers took their jobs: at least one of 6 taken by 3
    # workers at once, not 4 on a loaded box where a worker starts late)
    runs = sum(int(n) for n in r.hgetall(lj.RUNS).values())
    assert int(r.get(K.counter("overlimit")) or 0) == runs - 6 >= 1
    assert d.stop() == 0
