"""queued.api's bulk actions racing real workers (issue 16): a bulk action acts once on each
job present when it began and on no other, even when the jobs it moves come back into the same
set while it runs; a filtered delete of a queue being consumed leaves no match behind."""
from __future__ import annotations

import json
import time

import jobs
from harness import counts, wait_for
from queued import api


def dead_failing_jobs(r, n: int) -> list[str]:
    """``n`` dead Fail jobs with ``retry: 0`` (no retries, then dead): a retry of one runs it,
    it fails at once and goes back to dead as a new member (new error time and bytes)."""
    died = time.time() - 3600
    jids = []
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        jid = f"{i:024x}"
        jids.append(jid)
        pipe.zadd("dead", {json.dumps({
            "retry": 0, "queue": "default", "class": "Fail", "args": [f"again-{i}"],
            "jid": jid, "created_at": died - 60, "enqueued_at": died - 1, "failed_at": died,
            "error_class": "RuntimeError", "error_message": "again", "retry_count": 0},
            separators=(",", ":")): died + i * 1e-6})
    pipe.execute()
    return jids


def test_retry_all_retries_each_dead_job_once_while_its_retries_fail_back_into_dead(daemon, r):
    # Given 5,000 dead jobs whose every run fails straight back into dead, and a daemon
    n = 5000
    jids = dead_failing_jobs(r, n)
    d = daemon(concurrency=4, job_logging=False)
    # When one retry_all runs while the workers fail the retried jobs back into dead
    admin = api.Admin(r)
    retried = admin.dead.retry_all()
    # Then it retried each job present when it began, once
    assert retried == n
    # and once every retried job has run and failed back into dead, each ran exactly once
    wait_for(lambda: r.zcard("dead") == n and r.llen("queue:default") == 0, 120,
             interval=0.1, what="every retried job to be back in dead")
    runs = counts(r, jobs.RUNS)
    assert sorted(runs) == sorted(jids)
    assert {jid: c for jid, c in runs.items() if c != 1} == {}
    assert d.stop() == 0


def test_a_filtered_delete_of_a_queue_being_consumed_leaves_no_match_behind(daemon, r):
    # Given 10,000 jobs in a queue that four workers consume, every tenth one's argument
    # saying del-
    n = 10_000
    d = daemon(concurrency=4, job_logging=False, queues=["bulk"])
    now = time.time()
    doomed = set()
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        jid = f"{i:024x}"
        tag = f"del-{i}" if i % 10 == 0 else f"run-{i}"
        if i % 10 == 0:
            doomed.add(jid)
        pipe.lpush("queue:bulk", json.dumps({
            "retry": True, "queue": "bulk", "class": "Sleep", "args": [0.002, tag],
            "jid": jid, "created_at": now, "enqueued_at": now}, separators=(",", ":")))
    pipe.sadd("queues", "bulk")
    pipe.execute()
    wait_for(lambda: counts(r, jobs.RUNS), 10, what="the workers to start on the queue")
    # When every del- job is deleted while the workers take jobs from the other end
    admin = api.Admin(r)
    deleted = admin.queue("bulk").delete_all(api.Filter.of(arg="del-"))
    # Then no del- job is left in the queue
    left = [e.jid for e in admin.queue("bulk").scan(api.Filter.of(arg="del-"))]
    assert left == []
    # and each del- job was either deleted or run by a worker before the delete reached it
    wait_for(lambda: r.llen("queue:bulk") == 0 and
             sum(counts(r, jobs.DONE).values()) == n - deleted, 120, interval=0.1,
             what="the workers to run the rest")
    ran = set(counts(r, jobs.RUNS))
    assert len(doomed & ran) + deleted == len(doomed)
    assert set(counts(r, jobs.RUNS).values()) == {1}
    assert d.stop() == 0
