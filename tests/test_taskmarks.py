"""An operator's removal of a task's job (queued.api: delete from a queue or a set, kill to
dead) makes it a final error in its task, so the task completes instead of waiting for a job
that will never run; jobs outside a task, and jobs the removal did not take, are left alone.
Real Redis; the retry and dead entries are written as the daemon's failure path leaves them."""
from __future__ import annotations

import json
import time

import queued
from queued import api, tracking
from queued.keys import TASK_STATES, Keys
from queued.task import Task
from queued.tracking import Move

KEYS = Keys()


class Listing(queued.Job):
    def perform(self, n):
        pass


class RemovalsDone(queued.Job):
    queued_options = {"queue": "callbacks"}

    def perform(self, task_id, summary):
        pass


def fail_into(r, zset, jid, final):
    """Take the job out of its queue and leave it in ``zset`` as a failure left it, its task
    told (retry: waiting; dead: final)."""
    for raw in r.lrange("queue:default", 0, -1):
        msg = json.loads(raw)
        if msg["jid"] == jid:
            r.lrem("queue:default", 1, raw)
            msg.update(error_class="TimeoutError", error_message="shop API timed out",
                       retry_count=2, failed_at=time.time())
            r.zadd(zset, {json.dumps(msg): time.time() + (0 if final else 3600)})
            err = tracking.error_json("TimeoutError", "shop API timed out", final=final,
                                      retry_count=2)
            assert tracking.mark(r, KEYS, Move(msg["task_id"], jid, "error" if final
                                               else "retry", err))
            return
    raise AssertionError(f"{jid} not in the queue")


def states(r, task):
    return {s: {j.decode() for j in r.smembers(k)}
            for s, k in zip(TASK_STATES, KEYS.task_keys(task.id)[1:7]) if r.scard(k)}


def test_removed_jobs_become_final_errors_and_the_task_completes(producer, r):
    # Given a task of three jobs: one retrying, one dead, one waiting in its queue
    task = Task("removals", on_complete=RemovalsDone)
    with task:
        retrying, dead, waiting = Listing.perform_bulk([[1], [2], [3]])
    fail_into(r, "retry", retrying, final=False)
    fail_into(r, "dead", dead, final=True)
    admin = api.Admin(r)
    assert task.progress()["complete"] is False
    # When an operator kills the retrying one and deletes the waiting one
    assert admin.retries.kill(admin.retries.find(retrying))
    assert admin.queue("default").delete(admin.queue("default").find(waiting))
    # Then each is a final error saying how it went, and the task completed, once
    assert states(r, task) == {"error": {retrying, dead, waiting}}
    killed = task.job(retrying)["error"]
    assert (killed["class"], killed["final"], killed["retry_count"]) == \
        ("TimeoutError", True, 2)
    assert killed["message"] == ("shop API timed out (killed by an operator (moved to dead) "
                                 "from the retry set)")
    assert task.job(waiting)["error"]["message"] == \
        "deleted by an operator from queue default"
    assert task.progress()["complete"] is True
    assert r.llen("queue:callbacks") == 1


def test_a_filtered_bulk_delete_marks_exactly_the_task_jobs_it_removed(producer, r):
    # Given a retry set mixing jobs of a task with jobs outside it, of two classes
    task = Task("bulk")
    with task:
        in_task = Listing.perform_bulk([[i] for i in range(6)])
    outside = Listing.perform_bulk([[i] for i in range(6, 12)])
    for jid in in_task:
        fail_into(r, "retry", jid, final=False)
    for raw in r.lrange("queue:default", 0, -1):  # the others, retrying outside any task
        msg = json.loads(raw)
        r.lrem("queue:default", 1, raw)
        msg.update(error_class="KeyError", error_message="gone", retry_count=0)
        r.zadd("retry", {json.dumps(msg): time.time() + 60})
    # When every retry whose error mentions the shop API is deleted
    admin = api.Admin(r)
    assert admin.retries.delete_all(api.Filter.of(error="shop API")) == 6
    # Then exactly the task's jobs are final errors there, and the others are untouched
    assert states(r, task) == {"error": set(in_task)}
    assert {e.jid for e in admin.retries.scan()} == set(outside)
    assert task.progress()["complete"] is True


def test_deleting_a_dead_job_of_a_task_keeps_its_real_error(producer, r):
    # Given a task whose job died (a final error, as its failure path left it)
    task = Task("dead delete")
    with task:
        (dead,) = Listing.perform_bulk([[1]])
    fail_into(r, "dead", dead, final=True)
    before = task.job(dead)["error"]
    admin = api.Admin(r)
    # When an operator deletes it from dead
    assert admin.dead.delete(admin.dead.find(dead))
    # Then its task keeps the error it died with (the job was final already)
    assert task.job(dead)["error"] == before
    assert before["message"] == "shop API timed out"
    assert states(r, task) == {"error": {dead}}
    # and so does a bulk delete from dead
    with Task("dead bulk delete") as bulk:
        (other,) = Listing.perform_bulk([[2]])
    fail_into(r, "dead", other, final=True)
    kept = bulk.job(other)["error"]
    assert admin.dead.delete_all(api.Filter.of(error="shop API")) == 1
    assert bulk.job(other)["error"] == kept


def test_clearing_a_whole_set_or_queue_tells_the_tasks_of_the_jobs_it_held(producer, r):
    # Given a task with one job retrying, one scheduled and one waiting in its queue, and
    # jobs outside any task in each place
    task = Task("clears", on_complete=RemovalsDone)
    with task:
        retrying, waiting = Listing.perform_bulk([[1], [2]])
        later = Listing.perform_in(3600, 3)
    fail_into(r, "retry", retrying, final=False)
    Listing.perform_in(3600, 4)
    outside = Listing.perform_async(5)
    admin = api.Admin(r)
    # When each place is cleared whole
    assert admin.retries.delete_all() == 1
    assert admin.scheduled.delete_all() == 2
    assert admin.queue("default").clear() == 2
    # Then each of the task's jobs is a final error saying how it went, the task completed,
    # and nothing is left
    assert states(r, task) == {"error": {retrying, later, waiting}}
    assert task.job(later)["error"]["message"] == "deleted by an operator from the schedule"
    assert task.job(waiting)["error"]["message"] == "deleted by an operator from queue default"
    assert task.progress()["complete"] is True
    assert r.llen("queue:callbacks") == 1
    assert not r.exists("retry", "schedule", "queue:default")
    assert task.job(outside) is None  # (a job of no task, deleted beside them, is in none)
    assert r.keys("queued:snapshot:*") == []
