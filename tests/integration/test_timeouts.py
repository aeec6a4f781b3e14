"""Job time limits in a real daemon: SIGALRM first, the master's SIGKILL behind it."""
import jobs
import pytest
from harness import counts, wait_for, zjobs


def runs(r):
    return counts(r, jobs.RUNS)


def done(r):
    return counts(r, jobs.DONE)


def only(items):
    assert len(items) == 1, items
    return items[0]


def test_a_job_past_its_timeout_fails_with_jobtimeout_and_the_worker_survives(
        daemon, producer, r):
    # Given one worker
    d = daemon(concurrency=1)
    (worker,) = d.worker_pids()
    # When a job with a 0.3 s limit runs for 5 s
    jid = jobs.Timed.perform_async(5)
    # Then SIGALRM stops it: a retry entry with error_class JobTimeout (run to its end, it
    # would have finished instead)
    entry = wait_for(lambda: zjobs(r, "retry"), what="retry entry")
    entry = only(entry)
    assert entry["jid"] == jid
    assert entry["error_class"] == "JobTimeout"
    assert "0.3s timeout" in entry["error_message"]
    assert entry["retry_count"] == 0
    assert done(r) == {}
    # And the same worker process goes on to serve the next job
    nxt = jobs.Record.perform_async("next")
    wait_for(lambda: done(r).get(nxt) == 1, 5, what="next job")
    assert d.worker_pids() == [worker]
    assert "killing it" not in d.output()
    assert d.stop() == 0


@pytest.mark.parametrize("job", [jobs.BlockAlarm, jobs.Swallow], ids=["blocks", "swallows"])
def test_a_job_that_ignores_sigalrm_is_killed_by_the_master_at_timeout_plus_grace(
        daemon, producer, r, job):
    # Given one worker and a 0.5 s grace after a job's timeout
    d = daemon(concurrency=1, timeout_grace=0.5)
    (worker,) = d.worker_pids()
    # When a job with a 0.3 s limit (retry 0) blocks or swallows SIGALRM and runs on for 30 s
    jid = job.perform_async(30)
    wait_for(lambda: jid in runs(r), 5, what="job start")
    # Then the master kills its worker after 0.3 + 0.5 s, and the job takes the failure path:
    # dead (retry 0), error_class JobTimeout, saying that its worker was killed
    entry = only(wait_for(lambda: zjobs(r, "dead"), 5, what="dead entry"))
    assert entry["jid"] == jid
    assert entry["error_class"] == "JobTimeout"
    assert "worker was killed" in entry["error_message"]
    assert entry["retry_count"] == 0 and "failed_at" in entry
    assert done(r) == {}
    assert r.zcard("retry") == 0 and r.llen("queue:default") == 0
    assert "killed its worker" not in d.output()  # a timeout is not a crash
    assert "queued_crashes" not in entry
    # And a new worker takes its place and serves the next job
    wait_for(lambda: d.worker_pids() and d.worker_pids() != [worker], 5, what="new worker")
    nxt = jobs.Record.perform_async("next")
    wait_for(lambda: done(r).get(nxt) == 1, 5, what="next job")
    assert runs(r)[jid] == 1  # killed once, not rerun
    assert "past its 0.3s timeout" in d.output()
    assert d.stop() == 0
    wait_for(lambda: int(r.get("stat:failed") or 0) == 1, what="the kill counted as a failure")


def test_a_payload_timeout_overrides_the_class_option(daemon, producer, r):
    d = daemon()
    # Given Timed's class limit of 0.3 s
    # When one job's payload carries "timeout": 3 and runs 0.8 s, and another's carries 0.3
    # on a class without a limit and runs 5 s
    longer = jobs.Timed.set(timeout=3).perform_async(0.8)
    shorter = jobs.Sleep.set(timeout=0.3).perform_async(5)
    plain = jobs.Timed.perform_async(0.8)
    # Then the first finishes, the others fail with JobTimeout
    wait_for(lambda: done(r).get(longer) == 1, 5, what="longer job to finish")
    failed = wait_for(lambda: len(zjobs(r, "retry")) == 2 and zjobs(r, "retry"), 5,
                      what="two timeouts")
    assert {e["jid"] for e in failed} == {shorter, plain}
    assert {e["error_class"] for e in failed} == {"JobTimeout"}
    assert d.stop() == 0


def test_config_job_timeout_applies_to_classes_without_their_own(daemon, producer, r):
    # Given a daemon whose default job timeout is 0.3 s
    d = daemon(job_timeout=0.3)
    # When a class without a limit runs 5 s and a class with its own 5 s limit runs 0.8 s
    limited = jobs.Sleep.perform_async(5)
    own = jobs.Patient.perform_async(0.8)
    # Then the first fails with JobTimeout, the second finishes
    entry = only(wait_for(lambda: zjobs(r, "retry"), what="retry entry"))
    assert entry["jid"] == limited and entry["error_class"] == "JobTimeout"
    assert limited not in done(r)
    wait_for(lambda: done(r).get(own) == 1, 5, what="own-limit job to finish")
    assert r.zcard("dead") == 0
    assert d.stop() == 0


def test_the_master_fails_the_job_that_overran_not_a_finished_one_of_its_batch(
        daemon, producer, r):
    # Given a deep queue of quick jobs (the worker reserves them in batches) with a job that
    # blocks SIGALRM among them
    quick = jobs.Record.perform_bulk([[i] for i in range(40)])
    stuck = jobs.BlockAlarm.perform_async(30)
    quick += jobs.Record.perform_bulk([[i] for i in range(40, 60)])
    # When one worker runs them with a 0.5 s grace
    d = daemon(concurrency=1, timeout_grace=0.5)
    # Then the stuck job, and only it, is killed for its timeout and lands in dead
    wait_for(lambda: set(done(r)) == set(quick), 15, what="the quick jobs")
    entry = only(wait_for(lambda: zjobs(r, "dead"), 5, what="dead entry"))
    assert entry["jid"] == stuck and entry["error_class"] == "JobTimeout"
    assert runs(r)[stuck] == 1
    assert all(runs(r)[j] == 1 for j in quick)
    assert r.zcard("retry") == 0 and r.llen("queue:default") == 0
    assert d.stop() == 0
