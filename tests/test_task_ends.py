"""The end of a job of a task, sent ahead like an ack (fetch.Fetcher.finish_ahead: its ack and
its state in the task in one script call, the reply read with the next call), when the reply
never comes (its connection killed after Redis ran it, or before) or Redis refuses it
(NOREPLICAS): it is run again, it is written once, and the task completes once, with one
callback."""
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
    # Given a worker that ran the last job of a task and sent its end ahead
    task, jid = task_of_one(producer)
    f = make_fetcher()
    (res,) = f.reserve(1)
    f.finish_ahead(res, Move(task.id, jid, "finished"))
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
        f.finish_ahead(res, Move(task.id, jid, "finished"))
        from harness import wait_for
        wait_for(lambda: any(c["id"] == str(f.client_id) and c["cmd"] in ("eval", "evalsha")
                             for c in r.client_list()), 5, what="the end to wait in Redis")
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
        # When its end is sent ahead and refused
        f.finish_ahead(res, Move(task.id, jid, "finished"))
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
