"""Job operations inside perform, as Beanstalkd's: release (run again later, not a failure),
bury (to dead on purpose), touch (keep a long job's lease while its master is frozen), each
counted in the payload; and the kick from outside (a dead job retried by the operator)."""
import json
import os
import signal
import time

import jobs

from harness import counts, wait_for, zjobs
from queued import api


def stat(r, name) -> int:
    return int(r.get(f"stat:{name}") or 0)


def test_release_with_a_delay_runs_the_job_again_later_and_is_no_failure(daemon, producer, r):
    d = daemon(concurrency=1)
    jid = jobs.Releases.perform_async(1.5, 1)
    wait_for(lambda: r.zcard("schedule") == 1, 5, what="the release scheduled")
    (entry, score) = r.zrange("schedule", 0, -1, withscores=True)[0]
    released_at = time.time()
    assert score == pytest_approx(released_at + 1.5, 1.0)
    wait_for(lambda: counts(r, jobs.DONE).get(jid) == 1, 10, what="the second run")
    # It ran twice: once released, once to the end, not before its time
    assert counts(r, jobs.RUNS)[jid] == 2
    first, second = (json.loads(m) for m in r.lrange(jobs.MSGS, 0, -1))
    assert "release_count" not in first and second["release_count"] == 1
    assert second.get("retry_count") == first.get("retry_count")  # no retry counted
    assert second["enqueued_at"] >= released_at + 1.0
    # And no failure was counted (the processed count is each run)
    wait_for(lambda: stat(r, "processed") == 2, 5, what="the stats flushed")
    assert stat(r, "failed") == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert d.stop() == 0


def pytest_approx(value, tolerance):
    import pytest
    return pytest.approx(value, abs=tolerance)


def test_release_now_puts_the_job_back_in_its_queue(daemon, producer, r):
    d = daemon(concurrency=1)
    jid = jobs.Releases.set(queue="default").perform_async(0, 2)
    wait_for(lambda: counts(r, jobs.DONE).get(jid) == 1, 10, what="the third run")
    assert counts(r, jobs.RUNS)[jid] == 3
    counts_seen = [json.loads(m).get("release_count") for m in r.lrange(jobs.MSGS, 0, -1)]
    assert counts_seen == [None, 1, 2]
    assert r.zcard("schedule") == 0 and r.zcard("retry") == 0
    assert "released: back in queue default" in d.output()
    assert d.stop() == 0


def test_bury_sends_the_job_to_dead_now_and_a_kick_brings_it_back(daemon, producer, r):
    d = daemon(concurrency=1)
    jid = jobs.Buries.perform_async("supplier gone")
    (entry,) = wait_for(lambda: zjobs(r, "dead"), 10, what="the buried job in dead")
    # To dead at once, whatever retries it has; the reason and the bury counted; an
    # `except Exception` in the job did not catch it
    assert (entry["jid"], entry["error_class"], entry["error_message"], entry["bury_count"]) \
        == (jid, "Buried", "supplier gone", 1)
    assert r.zcard("retry") == 0 and r.llen("t:caught") == 0
    assert counts(r, jobs.RUNS)[jid] == 1 and jid not in counts(r, jobs.DONE)
    # When the operator kicks it (retry from dead), it runs again, its kick counted
    admin = api.Admin(r)
    assert admin.dead.retry(admin.dead.find(jid)) is True
    wait_for(lambda: counts(r, jobs.RUNS)[jid] == 2, 10, what="the kicked run")
    (again,) = wait_for(lambda: zjobs(r, "dead"), 10, what="buried again")
    assert (again["kick_count"], again["bury_count"]) == (1, 2)
    assert d.stop() == 0


def test_touch_keeps_a_long_job_of_a_frozen_master_from_being_recovered(
        daemon, producer, r):
    # Given a master running a 5 s job that touches its lease every 0.5 s, a 2 s lease, and a
    # second master beside it
    d1 = daemon(concurrency=1, lease_timeout=2, heartbeat_interval=0.5)
    jid = jobs.Touches.perform_async(5, 0.5)
    wait_for(lambda: jid in counts(r, jobs.RUNS), 5, what="the job to start")
    d2 = daemon(concurrency=1, lease_timeout=2, heartbeat_interval=0.5)
    # When the first master alone is frozen (its worker runs on)
    os.kill(d1.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: counts(r, jobs.DONE).get(jid) == 1, 15, what="the job to finish")
        # Then the job ran once, to its end: every touch renewed the lease, so the other
        # master never took it back (without touches it was recovered and ran twice)
        assert counts(r, jobs.RUNS)[jid] == 1
        assert "stopped renewing its lease" not in d2.output()
        assert set(r.lrange("t:touched", 0, -1)) == {b"1"}
    finally:
        os.kill(d1.pid, signal.SIGCONT)
    assert d1.stop() == 0 and d2.stop() == 0


def test_touch_outside_a_worker_says_so():
    import pytest
    import queued
    with pytest.raises(RuntimeError, match="touch"):
        queued.touch()
    with pytest.raises(ValueError):
        queued.release(-1)
