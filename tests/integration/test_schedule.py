"""Scheduled and retried jobs come back on time, once."""
import json
import time

import jobs
from harness import counts, wait_for, zmembers


def runs(r):
    return counts(r, jobs.RUNS)


def done(r):
    return counts(r, jobs.DONE)


def stamps(r):
    return {k.decode(): float(v) for k, v in r.hgetall(jobs.STAMPS).items()}


def test_perform_in_runs_on_time(daemon, producer, r):
    # Given a running daemon (the scheduler leader is elected at boot)
    d = daemon()
    # When 20 jobs are scheduled 1 s ahead
    due = {}
    for i in range(20):
        at = time.time() + 1.0
        due[jobs.Stamp.perform_in(1.0, i)] = at
    assert r.zcard("schedule") == 20
    # Then none runs early, and they run within milliseconds of their time (p90 < 300 ms)
    wait_for(lambda: len(stamps(r)) == 20, 10, what="20 scheduled jobs")
    late = sorted(stamps(r)[jid] - at for jid, at in due.items())
    assert late[0] >= -0.01, late
    assert late[int(len(late) * 0.9) - 1] < 0.3, late
    assert r.zcard("schedule") == 0
    assert d.stop() == 0


def test_perform_at_in_the_past_runs_now(daemon, producer, r):
    d = daemon()
    t0 = time.time()
    # A past time given to the client enqueues at once...
    direct = jobs.Stamp.perform_at(time.time() - 3600, "client")
    # ...and a past score written to the schedule by another producer is moved at once
    raw = {"retry": True, "queue": "default", "class": "Stamp", "args": ["zadd"],
           "jid": "0123456789abcdef01234567", "created_at": time.time()}
    r.zadd("schedule", {json.dumps(raw, separators=(",", ":")): time.time() - 60})
    wait_for(lambda: len(stamps(r)) == 2, 5, what="both jobs")
    assert max(stamps(r).values()) - t0 < 1.0
    assert set(stamps(r)) == {direct, raw["jid"]}
    assert d.stop() == 0


def test_a_failed_job_comes_back_from_the_retry_set(daemon, producer, r):
    d = daemon()
    # Given a job that fails its first run (retry_in 1 s, Sidekiq's jitter on top)
    jid = jobs.FailOnce.perform_async("x")
    # Then after the failure it waits in retry with Sidekiq's fields
    ((member, score),) = wait_for(lambda: zmembers(r, "retry"), 5, what="retry entry")
    entry = json.loads(member)
    assert entry["jid"] == jid and entry["retry_count"] == 0
    assert entry["error_class"] == "RuntimeError"
    assert 1 <= score - entry["failed_at"] <= 1 + 9 + 0.01  # 1 + rand(10) * (0 + 1)
    # When its time comes (brought forward, to keep the test short)
    r.zadd("retry", {member: time.time() + 0.2}, xx=True)
    # Then the scheduler puts it back in its queue, and it runs again and succeeds
    wait_for(lambda: done(r).get(jid) == 1, 5, what="the retry to run")
    assert runs(r)[jid] == 2 and r.zcard("retry") == 0
    first, second = (json.loads(m) for m in r.lrange(jobs.MSGS, 0, -1))
    # with the same jid and created_at, a new enqueued_at and the failure fields kept
    assert second["jid"] == first["jid"] == jid
    assert second["created_at"] == first["created_at"]
    assert second["enqueued_at"] > first["enqueued_at"]
    assert second["enqueued_at"] >= entry["failed_at"]
    assert second["retry_count"] == 0 and second["error_class"] == "RuntimeError"
    assert d.stop() == 0


def test_two_schedulers_move_each_job_exactly_once(daemon, producer, r):
    # Given two daemons that both poll the schedule (the follower every ~50 ms too)
    fast = {"poll_interval_average": 0.05}
    d1, d2 = daemon(**fast), daemon(**fast)
    # When 300 jobs are scheduled 1 s ahead
    jids = jobs.Record.set(wait=1.0).perform_bulk([[i] for i in range(300)])
    assert r.zcard("schedule") == 300
    # Then each runs exactly once
    wait_for(lambda: len(done(r)) == 300 and r.zcard("schedule") == 0
             and r.llen("queue:default") == 0
             and sum(done(r).values()) == sum(runs(r).values()), 15, what="300 jobs")
    assert runs(r) == {j: 1 for j in jids}
    assert d1.stop() == 0 and d2.stop() == 0


def test_scheduled_jobs_run_on_time_after_the_scheduler_leader_dies(daemon, producer, r):
    # Given two daemons, the first one the scheduler leader (it started first)
    d1 = daemon()
    d1.wait_log("now runs the scheduler")
    d2 = daemon()
    assert r.get("queued:scheduler-leader").decode() == d1.identity()
    # When the leader's host dies with jobs due in 1 s
    due = time.time() + 1.0
    jids = jobs.Stamp.set(wait=1.0).perform_bulk([[i] for i in range(10)])
    d1.kill_all()
    # Then the other daemon takes the lead when the leader key expires (3 beats, 1.5 s) and
    # runs them within about that, not after its 5 s backstop poll
    wait_for(lambda: len(stamps(r)) == 10, 10, what="the scheduled jobs")
    assert set(stamps(r)) == set(jids)
    assert max(stamps(r).values()) - due < 1.5 + 1.0
    assert r.get("queued:scheduler-leader").decode() == d2.identity()
    assert d2.stop() == 0
