"""Expiring jobs with real daemons (issue 21): a job not started by its expires_at is dropped
as it is taken, never run, counted, its task told and its class's on_expired called; a retry
never extends the deadline."""
import json
import time

import limitjobs as lj
import queued
from harness import counts, wait_for
from queued import api
from queued.keys import Keys

REQUIRE = ("limitjobs.py",)


def expired_count(r):
    return int(r.get(Keys().counter("expired")) or 0)


def test_an_expired_job_in_a_paused_queue_is_never_run_once_unpaused(daemon, producer, r):
    # Given a paused queue, and a job of a task that expires half a second after its push
    admin = api.Admin(r)
    admin.queue("default").pause()
    d = daemon(concurrency=1, require=REQUIRE)
    with queued.Task("expiring") as task:
        jid = lj.Expiring.set(expires_in=0.5).perform_async()
    (payload,) = r.lrange("queue:default", 0, -1)
    deadline = json.loads(payload)["expires_at"]
    assert deadline == json.loads(payload)["enqueued_at"] + 0.5  # counted from the push
    # When its deadline passes while the queue is paused, and the queue is unpaused
    wait_for(lambda: time.time() > deadline + 0.05, 5, what="the deadline to pass")
    admin.queue("default").unpause()
    # Then the worker took it and dropped it unrun: counted, its hook called with its
    # payload, its task told (a final error, class Expired), nowhere else to be found
    wait_for(lambda: expired_count(r) == 1, 10, what="the job dropped as expired")
    (seen,) = wait_for(lambda: r.lrange(lj.EXPIRED, 0, -1), 5, what="on_expired")
    assert json.loads(seen)["jid"] == jid
    assert jid not in counts(r, lj.RUNS)
    assert r.llen("queue:default") == 0
    assert (r.zcard("retry"), r.zcard("dead"), r.zcard("schedule")) == (0, 0, 0)
    progress = wait_for(lambda: (p := task.progress())["complete"] and p, 5,
                        what="the task to complete")
    assert (progress["total"], progress["error"], progress["success"]) == (1, 1, False)
    (record,) = task.jobs("error")
    assert record["error"]["class"] == "Expired" and record["error"]["final"] is True
    assert "not started before its expires_at" in record["error"]["message"]
    # And no failure was counted for it
    assert int(r.get("stat:failed") or 0) == 0
    assert "expired: not started before its expires_at" in d.output()
    assert d.stop() == 0


def test_a_retry_never_extends_the_deadline(daemon, producer, r):
    # Given a job that expires 2 s after its push, fails, and would be retried 5 s later
    d = daemon(concurrency=1, require=REQUIRE)
    jid = lj.Expiring.perform_async(True)
    # Then its failure did not schedule a retry past its deadline: it expired there and then
    wait_for(lambda: expired_count(r) == 1, 10, what="the failed job expired")
    assert counts(r, lj.RUNS) == {jid: 1}
    assert (r.zcard("retry"), r.zcard("dead"), r.zcard("schedule")) == (0, 0, 0)
    (seen,) = wait_for(lambda: r.lrange(lj.EXPIRED, 0, -1), 5, what="on_expired")
    assert json.loads(seen)["jid"] == jid
    assert "its retry would come" in d.output()
    assert d.stop() == 0


def test_a_job_that_fails_before_its_deadline_is_retried_with_the_same_deadline(
        daemon, producer, r):
    # Given a job that may wait 30 s, fails once and is retried 5 s later
    d = daemon(concurrency=1, require=REQUIRE)
    jid = lj.Expiring.set(expires_in=30).perform_async(True)
    (waiting,) = wait_for(lambda: r.zrange("retry", 0, -1), 10, what="the retry")
    first = json.loads(r.lindex(lj.MSGS, 0))
    # Its retry carries the deadline of its push, unchanged (Celery #980 lost it on retry)
    assert json.loads(waiting)["expires_at"] == first["expires_at"]
    assert json.loads(waiting)["retry_count"] == 0
    assert expired_count(r) == 0
    assert d.stop() == 0
    assert counts(r, lj.RUNS) == {jid: 1}


def test_a_scheduled_job_counts_its_time_to_live_from_its_run_time(daemon, producer, r):
    d = daemon(concurrency=1, require=REQUIRE)
    # expires_in 2 s, scheduled 3 s out: it must still run (its clock starts at its run time)
    jid = lj.Expiring.perform_in(3)
    ((member, at),) = r.zrange("schedule", 0, -1, withscores=True)
    assert json.loads(member)["expires_at"] == at + 2
    wait_for(lambda: counts(r, lj.DONE).get(jid) == 1, 15, what="the scheduled job to run")
    assert expired_count(r) == 0
    assert d.stop() == 0
