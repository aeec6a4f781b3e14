"""The end of a job of a task that succeeded, gathered like an ack (fetch.Fetcher.finish_ahead)
and written with the acks (finish.lua: the acks and states of a task's jobs in one script
call, sent ahead, the reply read with the next call), when the reply never comes (its
connection killed after Redis ran it, or before) or Redis refuses it (NOREPLICAS): it is run again, it
is written once, and the task completes once, with one callback. And what one call of many
does (issue 18): every job's end, one completion check, the records a task lacked."""
from __future__ import annotations

import json

import pytest
import redis

import queued
from queued.keys import Keys
from queued.task import Task
from queued.tracking import Move

from conftest import FETCH_IDENTITY

K = Keys()
RESERVED = K.reserved(FETCH_IDENTITY, 0)


class EndJob(queued.Job):
    def perform(self, i):
        pass


class EndDone(queued.Job):
    queued_options = {"queue": "ended"}

    def perform(self, task_id, summary):
        pass


def task_of_one(producer) -> tuple[Task, str]:
    task = Task("ends", on_complete=EndDone)
    with task:
        jid = EndJob.perform_async(1)
    return task, jid


def callbacks(r) -> list[dict]:
    return [json.loads(m) for m in r.lrange("queue:ended", 0, -1)]


def test_an_end_whose_connection_is_killed_after_redis_ran_it_is_written_once(
        producer, r, make_fetcher):
    # Given a worker that ran the last job of a task and sent its end ahead (as before a job
    # that may run long)
    task, jid = task_of_one(producer)
    f = make_fetcher()
    (res,) = f.reserve(1)
    f.finish_ahead(res, Move(task.id, jid, "finished"), json.loads(res.payload))
    f.send_acks()
    # When Redis ran it, and then the connection is killed before the reply is read
    from harness import wait_for
    wait_for(lambda: task.progress()["complete"], 5, what="the end to run")
    assert r.client_kill_filter(_id=f.client_id) == 1
    # Then the next call finds the connection gone, and the one after runs the end again
    # (the reply was lost: it cannot know it ran), which changes nothing the second time
    with pytest.raises(redis.ConnectionError):
        f.reserve(1)
    assert f.reserve(1) == []
    assert task.progress()["finished"] == 1 and task.progress()["complete"] is True
    assert len(callbacks(r)) == 1 and r.zcard(RESERVED) == 0


def test_an_end_whose_connection_is_killed_before_redis_ran_it_is_run_again_once(
        producer, r, make_fetcher):
    # Given a worker that ran the last job of a task and sent its end ahead while Redis held
    # every write back (CLIENT PAUSE WRITE: a script call waits, unread)
    task, jid = task_of_one(producer)
    f = make_fetcher()
    (res,) = f.reserve(1)
    r.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    try:
        f.finish_ahead(res, Move(task.id, jid, "finished"), json.loads(res.payload))
        f.send_acks()
        from harness import wait_for
        # (blocked on the pause: CLIENT LIST's flag b, its command the end's script)
        wait_for(lambda: any(c["id"] == str(f.client_id) and "b" in c["flags"]
                             and c["cmd"] in ("eval", "evalsha") for c in r.client_list()),
                 5, what="the end to wait in Redis")
        # When its connection is killed before Redis ran it
        assert r.client_kill_filter(_id=f.client_id) == 1
    finally:
        r.execute_command("CLIENT", "UNPAUSE")
    assert task.progress()["complete"] is False and r.zcard(RESERVED) == 1
    assert callbacks(r) == []
    # Then the next call finds the connection gone, and the one after runs the end: the task
    # completes, with one callback, and the job's reservation is gone
    with pytest.raises(redis.ConnectionError):
        f.reserve(1)
    assert f.reserve(1) == []
    assert task.progress()["finished"] == 1 and task.progress()["complete"] is True
    assert len(callbacks(r)) == 1 and r.zcard(RESERVED) == 0


def test_an_end_redis_refuses_is_run_again_once_writes_are_allowed(producer, r, make_fetcher):
    # Given a worker that ran the last job of a task, and Redis refusing writes (no replica
    # for min-replicas-to-write: NOREPLICAS, as MISCONF on a full disk)
    task, jid = task_of_one(producer)
    f = make_fetcher()
    (res,) = f.reserve(1)
    r.config_set("min-replicas-to-write", 1)
    try:
        # When its end goes out with the next reserve call and is refused
        f.finish_ahead(res, Move(task.id, jid, "finished"), json.loads(res.payload))
        with pytest.raises(redis.ResponseError, match="NOREPLICAS"):
            f.reserve(1)  # (the reserve is refused too, after the end's refusal is read)
        assert task.progress()["complete"] is False and r.zcard(RESERVED) == 1
    finally:
        r.config_set("min-replicas-to-write", 0)
    # Then once writes are allowed, the next call runs it again, once: the task completes,
    # with one callback, and the job's reservation is gone
    assert f.reserve(1) == []
    assert task.progress()["finished"] == 1 and task.progress()["complete"] is True
    assert len(callbacks(r)) == 1 and r.zcard(RESERVED) == 0


def evals(r) -> int:
    stats = r.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("eval", "evalsha"))


def test_the_ends_of_a_batch_of_a_tasks_jobs_are_one_call_with_the_next_reserve(
        producer, r, make_fetcher):
    # Given a task of 5 jobs, all reserved by one worker in one batch, and run
    task = Task("ends", on_complete=EndDone)
    with task:
        jids = [EndJob.perform_async(i) for i in range(5)]
    f = make_fetcher()
    batch = f.reserve(5)
    assert sorted(json.loads(b.payload)["jid"] for b in batch) == sorted(jids)
    for res in batch:
        f.finish_ahead(res, Move(task.id, json.loads(res.payload)["jid"], "finished"),
                       json.loads(res.payload))
    # When the worker asks for more
    before = evals(r)
    assert f.reserve(5) == []
    # Then the five ends went out in one script call, with the reserve call: every job
    # finished, the task complete with one callback, nothing left reserved
    assert evals(r) - before == 2
    assert task.progress()["finished"] == 5 and task.progress()["complete"] is True
    assert len(callbacks(r)) == 1 and r.zcard(RESERVED) == 0


def test_a_job_its_task_has_no_record_of_gets_its_record_as_it_ends(producer, r, make_fetcher):
    # Given a task, and a job pushed into it by another language's producer: the payload
    # carries the task's id, and the task has no record of the job
    task = Task("ends")
    with task.batch():
        EndJob.perform_async(0)
    task.seal()
    foreign = {"class": "EndJob", "args": [7], "jid": "f" * 24, "queue": "default",
               "retry": True, "created_at": 1.0, "enqueued_at": 1.0, "task_id": task.id}
    r.lpush("queue:default", json.dumps(foreign))
    f = make_fetcher()
    batch = f.reserve(5)
    assert len(batch) == 2
    # When both end (short jobs: neither was marked working)
    for res in batch:
        f.finish_ahead(res, Move(task.id, json.loads(res.payload)["jid"], "finished"),
                       json.loads(res.payload))
    f.flush()
    f.flush()  # (the record's write was sent ahead by the first; read now)
    # Then both are finished, and the foreign job's record is there as a working mark writes
    # it (its class, queue and args)
    assert task.progress()["finished"] == 2
    record = json.loads(r.hget(K.task_keys(task.id)[7], "f" * 24))
    assert record == {"class": "EndJob", "queue": "default", "args": [7]}
