"""Tasks run by real daemons: the fate of every job, exact counts under kills, each callback
once (issue 10)."""
import json
import os
import random
import signal

import pytest
import taskjobs
from taskjobs import CALLBACKS, TBusiness, TComplete, TDoomed, TFlaky, TOk, TSuccess

from queued.keys import TASK_STATES, Keys
from queued.server.scripts import FAIL
from queued.task import Task

from harness import wait_for

JOBS = ("taskjobs.py",)


def sets(r, task):
    return {s: {j.decode() for j in r.smembers(k)}
            for s, k in zip(TASK_STATES, Keys().task_keys(task.id)[1:7])}


def callbacks(r, task_id=None):
    calls = [json.loads(c) for c in r.lrange(CALLBACKS, 0, -1)]
    return [c for c in calls if task_id is None or c[1] == task_id]


def reserved(r) -> list[float]:
    """The scores of every job held in a reserved set (-1: its end was refused, held)."""
    return [score for k in r.keys("queued:reserved:*")
            for _, score in r.zrange(k, 0, -1, withscores=True)]


def fill(task, n, kinds, pause=0.0):
    """n jobs spread over ``kinds`` (job classes) round robin; {class: [jids]}."""
    with task:
        return {cls: cls.perform_bulk([[i, pause] for i in range(n) if i % len(kinds) == k])
                for k, cls in enumerate(kinds)}


def test_a_10000_job_task_records_the_fate_of_every_job(daemon, producer, r):
    # Given a task of 10,000 jobs: successes, business failures, errors then success, and
    # errors until dead
    task = Task("mixed 10k", on_complete=TComplete, on_success=TSuccess)
    jids = fill(task, 10_000, (TOk, TBusiness, TFlaky, TDoomed))
    # When a daemon runs them
    d = daemon(require=JOBS, concurrency=4)
    wait_for(lambda: callbacks(r), 90, interval=0.2, what="the task's on_complete")
    # Then every job is where its kind says, and the counts are exact
    assert sets(r, task) == {"enqueued": set(), "working": set(),
                             "finished": set(jids[TOk]) | set(jids[TFlaky]),
                             "failed": set(jids[TBusiness]), "retry": set(),
                             "error": set(jids[TDoomed])}
    assert task.progress() == {"total": 10_000, "enqueued": 0, "working": 0,
                               "finished": 5_000, "failed": 2_500, "error": 2_500,
                               "retrying": 0, "complete": True, "success": False,
                               "sealed": True}
    # And each record says why
    business = task.job(jids[TBusiness][7])
    assert business["error"]["class"] == "JobFailed" and business["error"]["final"] is True
    assert "rejected: price below cost" in business["error"]["message"]
    flaky = task.job(jids[TFlaky][3])
    assert flaky["status"] == "finished" and flaky["error"]["class"] == "RuntimeError"
    assert [m["text"] for m in flaky["messages"]] == ["worked on the retry"]
    doomed = task.job(jids[TDoomed][0])
    assert doomed["error"] == {**doomed["error"], "class": "ValueError", "final": True,
                               "retry_count": 1}
    assert r.zcard("dead") == 2_500 and r.zcard("retry") == 0  # the doomed ones, not the rest
    assert task.job(jids[TOk][5])["messages"][0]["text"].startswith("ok ")
    # And on_complete ran once with the summary; on_success never (not every job finished)
    assert d.stop() == 0
    (call,) = callbacks(r)
    assert call == ["complete", task.id, {"task_id": task.id, "description": "mixed 10k",
                                          "total": 10_000, "finished": 5_000, "failed": 2_500,
                                          "error": 2_500, "complete": True, "success": False}]


def test_kills_of_workers_and_of_a_master_leave_counts_exact_and_callbacks_once(
        daemon, producer, r):
    # Given two tasks interleaved in the same queue: one that will succeed, one mixed
    good = Task("all good", on_complete=TComplete, on_success=TSuccess)
    mixed = Task("mixed", on_complete=TComplete, on_success=TSuccess)
    good_jids = fill(good, 1500, (TOk, TFlaky), pause=0.002)
    mixed_jids = fill(mixed, 1500, (TOk, TBusiness, TFlaky), pause=0.002)
    d1 = daemon(require=JOBS, concurrency=4, lease_timeout=2)
    runs = lambda: r.hlen(taskjobs.RUNS)  # noqa: E731
    # When workers are SIGKILLed through the run
    rng = random.Random(7)
    for _ in range(6):
        before = runs()
        wait_for(lambda: runs() >= before + 100, 60, what="progress between kills")
        os.kill(rng.choice(d1.worker_pids()), signal.SIGKILL)
    # And the whole host dies once, and a new master takes over
    wait_for(lambda: runs() >= 1800, 60, what="more progress")
    d1.kill_all()
    d2 = daemon(require=JOBS, concurrency=4, lease_timeout=2)
    wait_for(lambda: len(callbacks(r)) >= 3, 120, interval=0.1, what="three callbacks")
    assert d2.stop() == 0
    # Then the counts are exact, and every job ended where its kind says
    assert good.progress() == {"total": 1500, "enqueued": 0, "working": 0, "finished": 1500,
                               "failed": 0, "error": 0, "retrying": 0, "complete": True,
                               "success": True, "sealed": True}
    assert sets(r, mixed)["finished"] == set(mixed_jids[TOk]) | set(mixed_jids[TFlaky])
    assert sets(r, mixed)["failed"] == set(mixed_jids[TBusiness])
    assert mixed.progress()["total"] == 1500 and mixed.progress()["complete"] is True
    assert len(good_jids[TOk]) + len(good_jids[TFlaky]) == 1500
    # And each callback ran exactly once: good completed and succeeded, mixed only completed
    assert sorted(c[0] for c in callbacks(r, good.id)) == ["complete", "success"]
    assert [c[0] for c in callbacks(r, mixed.id)] == ["complete"]


def test_jobs_that_add_jobs_to_their_own_task_keep_it_open_until_those_end(
        daemon, producer, r):
    task = Task("fan out", on_complete=TComplete)
    with task:
        parents = taskjobs.TParent.perform_bulk([[i] for i in range(50)])
    daemon(require=JOBS, concurrency=4)
    wait_for(lambda: callbacks(r), 60, what="on_complete")
    (call,) = callbacks(r)
    assert call[2]["total"] == 200 and call[2]["finished"] == 200
    assert set(parents) <= sets(r, task)["finished"]
    assert task.progress()["total"] == 200


def test_a_job_whose_worker_died_under_it_shows_the_kill_and_then_its_success(
        daemon, producer, r):
    task = Task(on_complete=TComplete)
    with task:
        jid = taskjobs.TKillsOnce.perform_async(1)
    daemon(require=JOBS)
    wait_for(lambda: callbacks(r), 30, what="on_complete")
    record = task.job(jid)
    assert record["status"] == "finished"
    assert record["error"]["class"] == "WorkerKilled"
    assert "killed by SIGKILL" in record["error"]["message"]
    assert r.hget(taskjobs.RUNS, jid) == b"2"


def test_a_job_the_master_kills_at_its_timeout_is_a_final_error_in_its_task(
        daemon, producer, r):
    task = Task(on_complete=TComplete)
    with task:
        jid = taskjobs.TStuck.perform_async(1)
    daemon(require=JOBS, timeout_grace=0.5)
    wait_for(lambda: callbacks(r), 30, what="on_complete")
    record = task.job(jid)
    assert record["status"] == "error" and record["final"] is True
    assert record["error"]["class"] == "JobTimeout"
    assert callbacks(r)[0][2]["error"] == 1


def test_releases_and_buries_move_a_job_of_a_task(daemon, producer, r):
    # (job operations: a release goes back to enqueued, a bury is a final error)
    task = Task(on_complete=TComplete)
    with task:
        released = taskjobs.TRelease.perform_async(1)
        buried = taskjobs.TBury.perform_async(2)
    daemon(require=JOBS)
    wait_for(lambda: callbacks(r), 30, what="on_complete")
    assert task.job(released)["status"] == "finished"
    assert r.hget(taskjobs.RUNS, released) == b"2"
    assert task.job(buried)["status"] == "error"
    assert task.job(buried)["error"] == {**task.job(buried)["error"], "class": "Buried",
                                         "message": "no stock", "final": True}


def test_a_task_run_on_a_redis_that_never_saw_its_scripts_completes(daemon, producer, r):
    # Given a Redis whose script cache lacks the task's mark (just started, or SCRIPT FLUSH)
    # but has fail.lua (a failure ran before): a job's working mark sent ahead as EVALSHA
    # would be refused with NOSCRIPT while its end is not
    r.script_flush()
    r.script_load(FAIL.source)
    task = Task("fresh scripts", on_complete=TComplete)
    jids = fill(task, 20, (TOk,))
    # When a daemon runs the task
    daemon(require=JOBS, concurrency=2)
    wait_for(lambda: callbacks(r, task.id), 30, what="the task's on_complete")
    # Then every job is finished and none is left working (a refused mark run again after
    # the job's end had put it back in working: the task never completed)
    assert sets(r, task)["finished"] == set(jids[TOk])
    assert sets(r, task)["working"] == set()
    assert task.progress()["complete"] is True


@pytest.mark.parametrize("kind", [TOk, TBusiness])
def test_a_last_job_whose_callback_queue_holds_another_type_completes_once_it_is_fixed(
        daemon, producer, r, kind):
    # Given a task of one job whose callback goes to a queue this daemon does not serve,
    # whose key someone overwrote with a string
    task = Task("blocked callback", on_complete=TComplete, callback_queue="cbq")
    r.set("queue:cbq", "oops")
    with task:
        jid = kind.perform_async(1)
    # When a daemon runs the job (its end: sent ahead with its ack for a success, written
    # at once for a business failure)
    d = daemon(require=JOBS, concurrency=1)
    wait_for(lambda: r.hget(taskjobs.RUNS, jid), 10, what="the job to run")
    # Then its end is refused before any write: the job stays reserved (marked -1), its task
    # not complete, and the log says which key (task.lua wrote completed_at, then failed on
    # the push; the end run again found the reservation gone: the callback was lost)
    wait_for(lambda: reserved(r) == [-1.0], 10, what="the end held")
    d.wait_log("queue:cbq holds another Redis type", 10)
    assert task.progress()["complete"] is False
    # When the key is fixed
    r.delete("queue:cbq")
    # Then the end goes through (it is tried again every few seconds), and the callback is
    # pushed, once
    wait_for(lambda: r.llen("queue:cbq") == 1, 20, what="the callback")
    (cb,) = [json.loads(m) for m in r.lrange("queue:cbq", 0, -1)]
    assert cb["class"] == "TComplete" and cb["args"][0] == task.id
    assert task.progress()["complete"] is True and reserved(r) == []
    assert r.hget(taskjobs.RUNS, jid) == b"1"  # run once
    assert d.stop() == 0
    assert r.llen("queue:cbq") == 1


def test_the_same_jid_pushed_twice_into_a_task_is_one_job_run_once(daemon, producer, r):
    # Given a task whose producer pushes a job under a fixed jid twice in one block (an
    # idempotency key), and again in a later block, beside a job of its own
    task = Task("fixed jids", on_complete=TComplete)
    with task.batch():
        producer.push({"class": "TOk", "args": [1, 0.3], "jid": "order-1"})
        other = TOk.perform_async(2)
        producer.push({"class": "TOk", "args": [1, 0.3], "jid": "order-1"})
    with task.batch():
        producer.push({"class": "TOk", "args": [1, 0.3], "jid": "order-1"})
    task.seal()
    # Then only the first push is in a queue: the others are the same job, not a second one
    assert [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)] == [other,
                                                                                "order-1"]
    # When a daemon with two workers runs the task
    daemon(require=JOBS, concurrency=2)
    wait_for(lambda: callbacks(r, task.id), 20, what="on_complete")
    # Then the job ran once, the task counts it once, and it completed once every push's
    # job had ended (before, the second copy ran on after the callback)
    assert r.hget(taskjobs.RUNS, "order-1") == b"1" and r.hget(taskjobs.RUNS, other) == b"1"
    assert task.progress()["total"] == 2 and task.progress()["finished"] == 2
    (call,) = callbacks(r, task.id)
    assert call[2]["total"] == 2 and call[2]["finished"] == 2
    assert r.llen("queue:default") == 0


def test_a_script_flush_in_the_middle_of_a_task_refuses_nothing_for_good(daemon, producer, r):
    # Given a daemon whose workers have sent the task scripts on their connections (the first
    # call of a script on a connection is an EVAL; the later ones EVALSHA)
    task = Task("flushed", on_complete=TComplete)
    with task.batch():
        first = TOk.perform_bulk([[i] for i in range(20)])
    d = daemon(require=JOBS, concurrency=2)
    wait_for(lambda: sets(r, task)["finished"] == set(first), 20, what="the first half")
    # When Redis loses its scripts (SCRIPT FLUSH, as after a failover to a replica that
    # never ran them), and the rest of the task runs: each worker's next mark and end go out
    # as EVALSHA and are refused with NOSCRIPT
    r.script_flush()
    with task.batch():
        # (jobs of 10 ms: a class whose jobs take 2 ms or more is marked working as each
        # starts, a quicker one only ended, with the others of its batch: both scripts run)
        second = TOk.perform_bulk([[i, 0.01] for i in range(20, 40)])
    task.seal()
    wait_for(lambda: callbacks(r, task.id), 30, what="the task's on_complete")
    # Then every end was written once (an end refused is run again as EVAL), no job is left
    # working (a refused working mark is dropped, never run after its end), the callback
    # came once, and the marks are sent as EVAL again (before, a worker whose script cache
    # entry was gone went on sending EVALSHA: every later mark of that worker was refused)
    assert sets(r, task)["finished"] == set(first) | set(second)
    assert sets(r, task)["working"] == set()
    assert len(callbacks(r, task.id)) == 1
    from queued.server.scripts import FINISH
    from queued.tracking import TASK_MARK
    assert r.script_exists(TASK_MARK.sha, FINISH.sha) == [True, True]
    assert d.stop() == 0
