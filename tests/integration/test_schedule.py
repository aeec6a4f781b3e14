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


def test_perform_in_runs_when_due_not_before(daemon, producer, r):
    # Given a running daemon, the scheduler leader (elected at boot), whose backstop poll as
    # a follower would be a minute away: only the leader's polling can move the jobs
    d = daemon(poll_interval_average=60)
    d.wait_log("now runs the scheduler")
    # When 20 jobs are scheduled 1 s ahead
    due = {}
    for i in range(20):
        at = time.time() + 1.0
        due[jobs.Stamp.perform_in(1.0, i)] = at
    assert r.zcard("schedule") == 20
    # Then none runs before its time, and all run (how late: scripts/bench's schedule
    # lateness, not asserted here)
    wait_for(lambda: len(stamps(r)) == 20, what="20 scheduled jobs")
    assert set(stamps(r)) == set(due)
    early = [stamps(r)[jid] - at for jid, at in due.items() if stamps(r)[jid] < at - 0.01]
    assert early == [], early
    assert r.zcard("schedule") == 0
    assert d.stop() == 0


def test_perform_at_in_the_past_runs_now(daemon, producer, r):
    d = daemon(poll_interval_average=60)
    d.wait_log("now runs the scheduler")
    # A past time given to the client enqueues at once, not into the schedule...
    direct = jobs.Stamp.perform_at(time.time() - 3600, "client")
    assert r.zcard("schedule") == 0
    # ...and a past score written to the schedule by another producer is moved by the
    # leader's next poll (a follower's backstop poll would be a minute away)
    raw = {"retry": True, "queue": "default", "class": "Stamp", "args": ["zadd"],
           "jid": "0123456789abcdef01234567", "created_at": time.time()}
    r.zadd("schedule", {json.dumps(raw, separators=(",", ":")): time.time() - 60})
    wait_for(lambda: len(stamps(r)) == 2, what="both jobs")
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


def test_scheduled_jobs_run_after_the_scheduler_leader_dies(daemon, producer, r):
    # Given two daemons, the first one the scheduler leader (it started first), the second
    # one's backstop poll as a follower a minute away
    d1 = daemon()
    d1.wait_log("now runs the scheduler")
    d2 = daemon(poll_interval_average=60)
    assert r.get("queued:scheduler-leader").decode() == d1.identity()
    # When the leader's host dies with jobs due in 1 s
    due = time.time() + 1.0
    jids = jobs.Stamp.set(wait=1.0).perform_bulk([[i] for i in range(10)])
    d1.kill_all()
    # Then the other daemon takes the lead when the leader key expires (3 beats, 1.5 s) and
    # runs them as their leader (its backstop poll could not have: it is a minute away)
    d2.wait_log("now runs the scheduler")
    assert r.get("queued:scheduler-leader").decode() == d2.identity()
    wait_for(lambda: len(stamps(r)) == 10, what="the scheduled jobs")
    assert set(stamps(r)) == set(jids)
    assert min(stamps(r).values()) >= due - 0.01  # not before their time
    assert d2.stop() == 0
