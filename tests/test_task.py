"""queued.Task against a real Redis: creating a task, and the Lua moves of its jobs (the
daemon's side is driven here through the same scripts a worker and a master call)."""
import hashlib
import json
import threading

import pytest

import queued
from queued import tracking
from queued.keys import TASK_STATES, Keys
from queued.middleware import Chain
from queued.server.reserved import GONE, REFUSED, WRITTEN, failure_call
from queued.server.scripts import FAIL
from queued.task import CHUNK, Task
from queued.tracking import Move

KEYS = Keys()


class Register(queued.Job):
    queued_options = {"queue": "promo"}

    def perform(self, product):
        pass


class Export(queued.Job):
    queued_options = {"queue": "exports", "retry": 3}

    def perform(self, start, stop):
        pass


class WhenDone(queued.Job):
    queued_options = {"queue": "callbacks"}

    def perform(self, task_id, summary):
        pass


class WhenOk(queued.Job):
    def perform(self, task_id, summary):
        pass


def queue_jobs(r, queue):
    return [json.loads(m) for m in r.lrange(f"queue:{queue}", 0, -1)]


def state_sets(r, task_id):
    return {s: {j.decode() for j in r.smembers(k)}
            for s, k in zip(TASK_STATES, KEYS.task_keys(task_id)[1:7])}


def move(r, task, jid, state, error=""):
    assert tracking.mark(r, KEYS, Move(task.id, jid, state, error))


def callbacks(r, queue="callbacks"):
    return queue_jobs(r, queue)


# --- creating ----------------------------------------------------------------------------------

def test_a_task_block_pushes_its_jobs_with_their_records_and_enqueued_state(producer, r):
    task = Task("promo 42")
    with task:
        a = Register.perform_async("p1")
        b = Export.perform_async(0, 500)
        c = Register.perform_in(3600, "later")
        bulk = Register.perform_bulk([["p2"], ["p3"]])
    jids = {a, b, c, *bulk}
    promo, exports = queue_jobs(r, "promo"), queue_jobs(r, "exports")
    scheduled = [json.loads(m) for m in r.zrange("schedule", 0, -1)]
    assert {j["jid"] for j in promo} == {a, *bulk}
    assert [j["jid"] for j in exports] == [b] and [j["jid"] for j in scheduled] == [c]
    assert {j["task_id"] for j in promo + exports + scheduled} == {task.id}
    assert state_sets(r, task.id)["enqueued"] == jids
    records = {k.decode(): json.loads(v)
               for k, v in r.hgetall(f"queued:task:{task.id}:jobs").items()}
    assert records[b] == {"class": "Export", "queue": "exports", "args": [0, 500]}
    assert records[bulk[1]] == {"class": "Register", "queue": "promo", "args": ["p3"]}
    (_, at), = r.zrange("schedule", 0, -1, withscores=True)
    assert records[c]["args"] == ["later"] and records[c]["at"] == at
    assert task.progress() == {"total": 5, "enqueued": 5, "working": 0, "finished": 0,
                               "failed": 0, "error": 0, "retrying": 0, "complete": False,
                               "success": False, "sealed": True}
    assert r.zrange("queued:tasks", 0, -1) == [task.id.encode()]


def test_a_block_that_raises_pushes_nothing_and_makes_no_task(producer, r):
    task = Task("broken")
    with pytest.raises(RuntimeError):
        with task:
            Register.perform_async("p1")
            raise RuntimeError("the producer failed half way")
    assert r.keys("*") == []
    assert Task.find(task.id) is None


def test_jobs_of_a_block_larger_than_a_chunk_all_join(producer, r):
    task = Task()
    with task:
        jids = Register.perform_bulk([[i] for i in range(CHUNK * 2 + 17)])
    assert r.llen("queue:promo") == CHUNK * 2 + 17
    assert state_sets(r, task.id)["enqueued"] == set(jids)
    assert r.hlen(f"queued:task:{task.id}:jobs") == CHUNK * 2 + 17


def test_pushes_with_client_middleware_join_the_task_too(producer, r):
    seen = []

    class Tag:
        def __call__(self, job_class, msg, queue, call_next):
            seen.append(msg.get("task_id"))
            msg["tags"] = ["promo"]
            return call_next()

    producer.middleware = Chain()
    producer.middleware.add(Tag)
    task = Task()
    with task:
        jids = Register.perform_bulk([["a"], ["b"]])
    assert seen == [task.id, task.id]
    assert {j["jid"] for j in queue_jobs(r, "promo")} == set(jids)
    assert all(j["tags"] == ["promo"] for j in queue_jobs(r, "promo"))
    assert state_sets(r, task.id)["enqueued"] == set(jids)


def test_a_jid_already_in_the_task_is_not_pushed_again(producer, r, caplog):
    # Given a task with a job under a fixed jid, and one a foreign producer's job started
    task = Task()
    with task.batch():
        producer.push({"class": Register, "args": [1], "jid": "fixed"})
    tracking.mark(r, KEYS, Move(task.id, "foreign", "working"),
                  tracking.record_json({"class": "Ruby::Job", "args": []}, "promo"))
    # When later blocks push those jids again, to a queue and to the schedule
    with task.batch():
        producer.push({"class": Register, "args": [2], "jid": "fixed"})
        producer.push({"class": Register, "args": [3], "jid": "foreign", "at": 9e9})
        new = Register.perform_async(4)
    # Then only the new job is pushed; the others keep their first record, and it is logged
    assert [j["jid"] for j in queue_jobs(r, "promo")] == [new, "fixed"]
    assert r.zcard("schedule") == 0
    assert task.job("fixed")["args"] == [1] and task.job("foreign")["class"] == "Ruby::Job"
    assert task.progress()["total"] == 3
    assert f"task {task.id}: 2 job(s) not pushed: their jid is already in the task" in caplog.text


# --- completing ------------------------------------------------------------------------------

def test_a_task_filled_in_batches_completes_only_once_sealed(producer, r):
    task = Task(on_complete=WhenDone)
    with task.batch():
        first = Register.perform_async(1)
    with task.batch():
        second = Register.perform_async(2)
    for jid in (first, second):
        move(r, task, jid, "working")
        move(r, task, jid, "finished")
    assert task.progress()["complete"] is False and callbacks(r) == []
    task.seal()
    assert task.progress()["complete"] is True
    assert len(callbacks(r)) == 1


def test_counts_stay_exact_when_a_job_runs_twice(producer, r):
    task = Task()
    with task:
        jid, other = Register.perform_bulk([[1], [2]])
    for state in ("working", "working", "finished", "working", "finished"):
        move(r, task, jid, state)  # ran, was killed, ran again: at-least-once
    assert task.progress()["total"] == 2
    assert task.progress()["finished"] == 1 and task.progress()["enqueued"] == 1
    assert state_sets(r, task.id) == {"enqueued": {other}, "working": set(),
                                      "finished": {jid}, "failed": set(), "retry": set(),
                                      "error": set()}


def test_each_callback_is_pushed_once_when_the_last_jobs_end_at_the_same_moment(producer, r):
    # Given 30 tasks whose last two jobs end at once, from two threads (two hosts)
    for _ in range(30):
        task = Task(on_complete=WhenDone, on_success=WhenOk)
        with task:
            jids = Register.perform_bulk([[1], [2]])
        start = threading.Barrier(2)

        def finish(jid):
            start.wait()
            move(r, task, jid, "finished")  # (redis-py's pool: a connection per thread)

        threads = [threading.Thread(target=finish, args=(j,)) for j in jids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    # Then each task pushed one on_complete and one on_success, no more
    done = [j["args"][0] for j in callbacks(r)]
    ok = [j["args"][0] for j in queue_jobs(r, "default")]
    assert len(done) == len(set(done)) == 30
    assert sorted(ok) == sorted(done)


def test_a_callback_is_a_sidekiq_job_with_the_tasks_summary(producer, r):
    task = Task("promo 42", on_complete=WhenDone, on_success="Billing::TaskOk",
                callback_queue=None)
    with task:
        jid, bad = Register.perform_bulk([[1], [2]])
    move(r, task, jid, "finished")
    move(r, task, bad, "failed", tracking.error_json("JobFailed", "below cost", final=True))
    (raw,) = r.lrange("queue:callbacks", 0, -1)
    cb = json.loads(raw)
    assert list(cb) == ["retry", "queue", "class", "args", "jid", "created_at", "enqueued_at"]
    assert cb["class"] == "WhenDone" and cb["queue"] == "callbacks" and cb["retry"] is True
    assert cb["jid"] == hashlib.sha1(f"{task.id}:complete".encode()).hexdigest()[:24]
    assert cb["args"] == [task.id, {"task_id": task.id, "description": "promo 42",
                                    "total": 2, "finished": 1, "failed": 1, "error": 0,
                                    "complete": True, "success": False}]
    assert isinstance(cb["created_at"], float) and cb["created_at"] == cb["enqueued_at"]
    assert r.llen("queue:default") == 0  # on_success: not every job finished
    assert b"callbacks" in r.smembers("queues")


def test_callback_queue_overrides_the_callbacks_own(producer, r):
    task = Task(on_complete=WhenDone, callback_queue="urgent")
    with task:
        pass  # an empty task completes when sealed
    assert [j["class"] for j in queue_jobs(r, "urgent")] == ["WhenDone"]
    assert task.progress() == {"total": 0, "enqueued": 0, "working": 0, "finished": 0,
                               "failed": 0, "error": 0, "retrying": 0, "complete": True,
                               "success": True, "sealed": True}


def test_on_success_comes_once_when_a_dead_job_of_a_complete_task_is_retried(producer, r):
    task = Task(on_complete=WhenDone, on_success=WhenOk)
    with task:
        jid, other = Register.perform_bulk([[1], [2]])
    move(r, task, other, "finished")
    move(r, task, jid, "retry", tracking.error_json("IOError", "down", final=False))
    assert callbacks(r) == []  # an error waiting for its retry is not final
    move(r, task, jid, "error", tracking.error_json("IOError", "down", final=True))
    assert len(callbacks(r)) == 1 and r.llen("queue:default") == 0
    # When an operator retries the dead job and it succeeds
    move(r, task, jid, "working")
    assert task.progress()["complete"] is True  # completion, once reached, stays recorded
    move(r, task, jid, "finished")
    move(r, task, jid, "finished")
    # Then on_success comes, once; on_complete does not come again
    assert len(callbacks(r)) == 1 and r.llen("queue:default") == 1
    assert task.progress()["success"] is True


# --- a callback's queue key of another type (issue 16.1.5) --------------------------------------

RESERVED = KEYS.reserved("host:1:abc", 0)


def reserve(r, msg: dict) -> bytes:
    """Put a job in a slot's reserved set as reserve.lua does; its member."""
    member = f"{msg['queue']}\0tok\0".encode() + json.dumps(msg).encode()
    r.zadd(RESERVED, {member: 9e9})
    return member


def end(r, task, member: bytes, jid: str, kind="done", state="finished", err=""):
    """A job's end as a worker writes it (fail.lua: its reservation and its task state)."""
    ks, args = failure_call(KEYS, RESERVED, member, kind, 0.0, "", 3600, 10_000,
                            task=Move(task.id, jid, state, err))
    return int(FAIL(r, ks, args))


@pytest.mark.parametrize("kind,state", [("done", "finished"), ("drop", "failed")])
def test_a_last_end_whose_callback_queue_is_another_type_writes_nothing_until_it_is_fixed(
        producer, r, kind, state):
    # Given a task with one job left, reserved by a worker, and its callbacks' queue key
    # overwritten with a string
    task = Task(on_complete=WhenDone)
    with task:
        jid = Register.perform_async(1)
    (payload,) = queue_jobs(r, "promo")
    member = reserve(r, payload)
    r.set("queue:callbacks", "oops")
    # When the job's end is written
    err = tracking.error_json("JobFailed", "no", final=True) if state == "failed" else ""
    # Then it is refused before any write: the reservation stays (marked, as fail.lua does
    # for a retry key of another type), the job is where it was in the task, nothing is
    # marked complete (task.lua wrote completed_at, then the callback's LPUSH failed: the
    # end run again found its reservation gone, and the callback was lost for good)
    assert end(r, task, member, jid, kind, state, err) == REFUSED
    assert r.zrange(RESERVED, 0, -1, withscores=True) == [(member, -1.0)]
    assert state_sets(r, task.id)["enqueued"] == {jid}
    assert task.progress()["complete"] is False
    assert r.get("queue:callbacks") == b"oops"
    # And once the key is fixed, the same end goes through, and the callback comes once
    r.delete("queue:callbacks")
    assert end(r, task, member, jid, kind, state, err) == WRITTEN
    assert [j["class"] for j in callbacks(r)] == ["WhenDone"]
    assert task.progress()["complete"] is True and state_sets(r, task.id)[state] == {jid}
    assert end(r, task, member, jid, kind, state, err) == GONE
    assert len(callbacks(r)) == 1


def test_an_end_that_does_not_complete_the_task_is_not_held_by_a_callback_queue(producer, r):
    # (only the move that completes the task pushes a callback: the others go through)
    task = Task(on_complete=WhenDone)
    with task:
        first, second = Register.perform_bulk([[1], [2]])
    a = reserve(r, next(j for j in queue_jobs(r, "promo") if j["jid"] == first))
    r.set("queue:callbacks", "oops")
    assert end(r, task, a, first) == WRITTEN
    assert state_sets(r, task.id)["finished"] == {first}
    # and a queue key of another type for a callback already pushed holds nothing back
    r.delete("queue:callbacks")
    move(r, task, second, "finished")
    r.set("queue:callbacks", "oops")
    b = reserve(r, next(j for j in queue_jobs(r, "promo") if j["jid"] == second))
    assert end(r, task, b, second) == WRITTEN


def test_a_mark_or_a_seal_that_would_complete_into_a_broken_queue_is_refused(producer, r):
    # Given a task whose every job is final but one, and its callbacks' queue a string
    task = Task(on_complete=WhenDone, on_success=WhenOk)
    with task.batch():
        first, last = Register.perform_bulk([[1], [2]])
    move(r, task, first, "finished")
    move(r, task, last, "finished")
    r.set("queue:default", "oops")  # on_success's queue (WhenOk's)
    # When the producer seals it: refused, naming the key; nothing written (still open)
    with pytest.raises(tracking.CallbackBlocked, match="queue:default holds another Redis"):
        task.seal()
    assert task.info()["sealed"] is False and callbacks(r) == []
    # And a mark that would complete it (an operator's removal) is refused the same way
    r.delete("queue:default")
    task.seal()
    assert len(callbacks(r)) == 1 and r.llen("queue:default") == 1
    other = Task(on_complete=WhenDone)
    with other:
        jid = Register.perform_async(3)
    r.set("queue:callbacks", "oops")
    with pytest.raises(tracking.CallbackBlocked, match="queue:callbacks"):
        tracking.mark(r, KEYS, Move(other.id, jid, "error",
                                    tracking.error_json("Removed", "deleted", final=True)))
    assert state_sets(r, other.id)["enqueued"] == {jid}
    r.delete("queue:callbacks")
    assert tracking.mark(r, KEYS, Move(other.id, jid, "error",
                                       tracking.error_json("Removed", "deleted", final=True)))
    assert [j["args"][0] for j in callbacks(r)] == [other.id]


# --- records -----------------------------------------------------------------------------------

def test_records_list_by_status_with_errors_and_messages(producer, r):
    task = Task()
    with task:
        jids = Register.perform_bulk([[i] for i in range(120)])
    for jid in jids[:70]:
        move(r, task, jid, "failed",
             tracking.error_json("JobFailed", f"no {jid}", final=True))
    ks, args = tracking.say_call(KEYS, task.id, jids[0], "price below cost", now=1000.5)
    assert tracking.TASK_SAY(r, ks, args) == 1
    failed = list(task.jobs("failed", count=16))
    assert sorted(j["jid"] for j in failed) == sorted(jids[:70])
    first = next(j for j in failed if j["jid"] == jids[0])
    assert first["status"] == "failed" and first["final"] is True
    assert first["error"]["class"] == "JobFailed"
    assert first["error"]["message"] == f"no {jids[0]}"
    assert first["messages"] == [{"at": 1000.5, "text": "price below cost"}]
    assert first["args"] == [0] and first["class"] == "Register"
    assert len(list(task.jobs())) == 120
    assert task.job(jids[100])["status"] == "enqueued"
    assert task.job("nope") is None
    page, cursor = task.page("failed", 0, 10)
    assert page and all(j["status"] == "failed" for j in page)
    with pytest.raises(ValueError):
        list(task.jobs("bogus"))


def test_the_error_status_lists_retrying_and_final_errors(producer, r):
    task = Task()
    with task:
        waiting, dead = Register.perform_bulk([[1], [2]])
    move(r, task, waiting, "retry", tracking.error_json("E", "x", final=False))
    move(r, task, dead, "error", tracking.error_json("E", "x", final=True))
    errors = {j["jid"]: j for j in task.jobs("error")}
    assert errors[waiting]["retrying"] is True and errors[waiting]["final"] is False
    assert errors[dead]["retrying"] is False and errors[dead]["final"] is True
    assert task.progress()["error"] == 2 and task.progress()["retrying"] == 1


def test_a_jobs_message_log_is_cut_at_its_cap_with_one_line_saying_so(producer, r):
    task = Task()
    with task:
        jid = Register.perform_async(1)
    text = "x" * 1000
    results = [tracking.TASK_SAY(r, *tracking.say_call(KEYS, task.id, jid, text))
               for _ in range(tracking.SAY_CAP // 1000 + 5)]
    assert results.count(-1) >= 3 and results[0] == 1
    messages = task.job(jid)["messages"]
    assert messages[-1]["text"].startswith("(later messages were dropped")
    assert all(m["text"] == text for m in messages[:-1])


def test_a_job_a_foreign_producer_pushed_joins_its_task_when_it_starts(producer, r):
    task = Task()
    with task.batch():
        Register.perform_async(1)
    record = tracking.record_json({"class": "Billing::Import", "args": [7]}, "imports")
    assert tracking.mark(r, KEYS, Move(task.id, "f" * 24, "working"), record)
    assert task.progress()["total"] == 2 and task.progress()["working"] == 1
    assert task.job("f" * 24)["class"] == "Billing::Import"



def test_a_task_sealed_with_a_total_waits_for_the_foreign_jobs_not_yet_started(producer, r):
    # Given an open task made empty, and two jobs another language pushed with only task_id
    task = Task(on_complete=WhenDone).create()
    assert task.progress() == {"total": 0, "enqueued": 0, "working": 0, "finished": 0,
                               "failed": 0, "error": 0, "retrying": 0, "complete": False,
                               "success": False, "sealed": False}
    # When its producer seals it announcing 2 jobs, and the first one runs to its end
    task.seal(total=2)
    assert task.info()["expected"] == 2
    move(r, task, "a" * 24, "working")
    move(r, task, "a" * 24, "finished")
    # Then it is not complete while the second has not started (it is counted from its start)
    assert task.progress()["complete"] is False and callbacks(r) == []
    move(r, task, "b" * 24, "working")
    assert task.progress()["complete"] is False
    move(r, task, "b" * 24, "failed", tracking.error_json("JobFailed", "no", final=True))
    # And complete, once, when it ends
    assert task.progress()["total"] == 2 and task.progress()["complete"] is True
    assert len(callbacks(r)) == 1


def test_a_bad_total_is_refused(producer):
    with pytest.raises(ValueError, match="total must be a whole number"):
        Task().seal(total=-1)

# --- memory ------------------------------------------------------------------------------------

def test_every_key_of_a_task_has_a_ttl_from_the_moment_it_exists(producer, r):
    task = Task(ttl_idle=1000, ttl_success=50, ttl_failure=500)
    with task:
        a, b, c = Register.perform_bulk([[1], [2], [3]])
    move(r, task, a, "working")
    move(r, task, b, "retry", tracking.error_json("E", "x", final=False))
    tracking.TASK_SAY(r, *tracking.say_call(KEYS, task.id, a, "hello"))
    keys = r.keys(f"queued:task:{task.id}*")
    assert {k.decode().rpartition(task.id)[2] for k in keys} == {
        "", ":enqueued", ":working", ":retry", ":jobs", ":errors", ":log"}
    assert all(900 < r.ttl(k) <= 1000 for k in keys), {k: r.ttl(k) for k in keys}
    for jid in (a, b, c):
        move(r, task, jid, "finished")
    assert all(40 < r.ttl(k) <= 50 for k in r.keys(f"queued:task:{task.id}*"))


def test_a_complete_task_with_failures_keeps_longer_then_expires(producer, r):
    task = Task(ttl_success=1, ttl_failure=2, ttl_idle=100)
    with task:
        jid = Register.perform_async(1)
    move(r, task, jid, "failed", tracking.error_json("JobFailed", "no", final=True))
    assert {r.ttl(k) for k in r.keys(f"queued:task:{task.id}*")} == {2}
    from harness import wait_for
    wait_for(lambda: r.keys(f"queued:task:{task.id}*") == [], 10, what="the task to expire")
    assert Task.find(task.id) is None


def test_moves_of_a_task_that_is_gone_bring_nothing_back(producer, r):
    task = Task()
    with task:
        jid = Register.perform_async(1)
    r.delete(*KEYS.task_keys(task.id))
    assert tracking.mark(r, KEYS, Move(task.id, jid, "finished")) is False
    assert tracking.TASK_SAY(r, *tracking.say_call(KEYS, task.id, jid, "late")) == 0
    assert r.keys("queued:task:*") == []


def test_bad_ttls_are_refused(producer):
    with pytest.raises(ValueError, match="ttl_success"):
        Task(ttl_success=0)
