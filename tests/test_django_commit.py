"""Pushes inside Django's transactions wait for the commit (queued/django/commit.py), against
the session's PostgreSQL and Redis: nothing of a rolled-back transaction ever reaches Redis,
and a committed one's job is pushed only once the commit is done."""
import json

import pytest

import queued


class Boom(Exception):
    pass


@pytest.fixture
def site(django_db, after_commit, default_client):
    return django_db


def queue_jids(r, queue="default"):
    return [json.loads(m)["jid"] for m in r.lrange(f"queue:{queue}", 0, -1)]


def test_a_push_in_a_rolled_back_transaction_never_reaches_redis(site, r):
    from django.db import transaction
    from ledger.jobs import SeeOrder
    from ledger.models import Order
    # When a job is pushed inside a transaction that then rolls back
    with pytest.raises(Boom):
        with transaction.atomic():
            order = Order.objects.create(ref="gone")
            jid = SeeOrder.perform_async(order.pk)
            bulk = SeeOrder.perform_bulk([[1], [2]])
            # Then the jids are known at once, and nothing is in Redis yet
            assert len(jid) == 24 and len(bulk) == 2
            assert r.keys("*") == []
            raise Boom()
    # And nothing ever reaches it
    assert r.keys("*") == []
    assert not Order.objects.exists()


def test_a_push_in_a_committed_transaction_is_written_after_the_commit(site, r):
    from django.db import connection, transaction
    from ledger.jobs import SeeOrder
    from ledger.models import Order
    seen_at_commit = []
    with transaction.atomic():
        order = Order.objects.create(ref="kept")
        jid = SeeOrder.perform_async(order.pk)
        bulk = SeeOrder.set(queue="bulk").perform_bulk([[order.pk], [order.pk]])
        assert r.keys("*") == []
        # (a callback registered after the pushes runs after them, once the commit is done)
        transaction.on_commit(lambda: seen_at_commit.append(
            (connection.in_atomic_block, queue_jids(r), queue_jids(r, "bulk"))))
    assert seen_at_commit == [(False, [jid], list(reversed(bulk)))]
    payload = json.loads(r.lrange("queue:default", 0, -1)[0])
    assert (payload["class"], payload["args"]) == ("SeeOrder", [order.pk])
    assert payload["created_at"] <= payload["enqueued_at"]


def test_a_savepoint_rolled_back_drops_only_its_own_pushes(site, r):
    from django.db import transaction
    from ledger.jobs import SeeOrder
    with transaction.atomic():
        kept = SeeOrder.perform_async(1)
        try:
            with transaction.atomic():
                SeeOrder.perform_async(2)
                raise Boom()
        except Boom:
            pass
        also = SeeOrder.perform_async(3)
    assert queue_jids(r) == [also, kept]
    assert [json.loads(m)["args"] for m in r.lrange("queue:default", 0, -1)] == [[3], [1]]


def test_after_commit_false_pushes_at_once_inside_a_transaction(site, r):
    from django.db import transaction
    from ledger.jobs import SeeOrder
    with pytest.raises(Boom):
        with transaction.atomic():
            jid = SeeOrder.set(after_commit=False).perform_async(1)
            assert queue_jids(r) == [jid]
            raise Boom()
    assert queue_jids(r) == [jid]


def test_outside_a_transaction_a_push_goes_at_once(site, r):
    from ledger.jobs import SeeOrder
    jid = SeeOrder.perform_async(1)
    assert queue_jids(r) == [jid]


def test_client_middleware_runs_at_the_commit_and_not_for_a_rollback(site, r):
    from django.db import transaction
    from ledger.jobs import SeeOrder
    calls = []

    class Count:
        def __call__(self, job, msg, queue, call_next):
            calls.append(msg["args"])
            return call_next()

    queued.client_middleware.add(Count)
    try:
        with pytest.raises(Boom):
            with transaction.atomic():
                SeeOrder.perform_async("rolled back")
                raise Boom()
        with transaction.atomic():
            SeeOrder.perform_async("committed")
            assert calls == []
        assert calls == [["committed"]]
    finally:
        queued.client_middleware.remove(Count)


def test_a_task_made_in_a_transaction_exists_only_once_it_commits(site, r):
    from django.db import transaction
    from ledger.jobs import SeeOrder
    with pytest.raises(Boom):
        with transaction.atomic():
            with queued.Task("rolled back") as gone:
                SeeOrder.perform_async(1)
            raise Boom()
    assert queued.Task.find(gone.id) is None and r.keys("*") == []
    with transaction.atomic():
        with queued.Task("committed") as task:
            SeeOrder.perform_bulk([[1], [2]])
        assert queued.Task.find(task.id) is None and r.keys("*") == []
    found = queued.Task.find(task.id)
    assert found.progress()["total"] == 2 and found.progress()["sealed"]
    assert {j["task_id"] for j in map(json.loads, r.lrange("queue:default", 0, -1))} == {
        task.id}


def test_a_push_names_its_database_when_the_transaction_is_on_another_one(site, r):
    from django.db import transaction
    from django.db.utils import ConnectionDoesNotExist
    from ledger.jobs import SeeOrder
    with transaction.atomic():
        with pytest.raises(ConnectionDoesNotExist):
            SeeOrder.set(after_commit="replica").perform_async(1)
        SeeOrder.set(after_commit="default").perform_async(2)
        assert r.keys("*") == []
    assert [json.loads(m)["args"] for m in r.lrange("queue:default", 0, -1)] == [[2]]


# --- a task's jobs go with the task (red team rt3 #1) ---------------------------------------------
#
# The rule: inside a task's block a push is handed to the task at once, whatever its own
# after_commit says; the task writes its jobs with itself, at once or at the commit its own
# after_commit chooses. (Before, a push that waited for a commit reached a block already written:
# the jid was returned and the job lost, the task complete with 0 jobs.)

@pytest.fixture
def other_db(site):
    """A second database alias, "other", on the same PostgreSQL database (a connection and
    transactions of its own), for this test."""
    from django.db import connections
    connections.settings["other"] = dict(connections.settings["default"])
    yield "other"
    if hasattr(connections._connections, "other"):
        connections["other"].close()
        del connections["other"]
    del connections.settings["other"]


def task_state(r, task):
    """(the task exists, its total, the task ids carried by the jobs in queue:default)."""
    found = queued.Task.find(task.id)
    tasks = [json.loads(m).get("task_id") for m in r.lrange("queue:default", 0, -1)]
    return (found is not None, found.progress()["total"] if found else None, tasks)


@pytest.mark.parametrize("opened", ["default", "other"])
@pytest.mark.parametrize("job_choice", [None, False, "default", "other"])
@pytest.mark.parametrize("task_choice", [None, False, "default", "other"])
@pytest.mark.parametrize("bulk", [False, True], ids=["push", "bulk"])
def test_a_tasks_jobs_are_written_with_the_task_whatever_each_push_chose(
        other_db, r, task_choice, job_choice, opened, bulk):
    from django.db import transaction
    from ledger.jobs import SeeOrder
    # Given a transaction open on one database, and a task that waits for that database's
    # commit or not (its after_commit: None means the default database)
    waits = task_choice is not False and (task_choice or "default") == opened
    with transaction.atomic(using=opened):
        # When a job is pushed in the task's block with an after_commit of its own
        with queued.Task("rt3-1", after_commit=task_choice) as task:
            pusher = SeeOrder.set(after_commit=job_choice)
            jids = pusher.perform_bulk([[1]]) if bulk else [pusher.perform_async(1)]
        # Then before the commit, the job is in Redis exactly when its task is
        assert len(jids) == 1 and len(jids[0]) == 24
        assert task_state(r, task) == ((False, None, []) if waits else (True, 1, [task.id]))
    # And after the commit the task has its one job, in the queue
    assert task_state(r, task) == (True, 1, [task.id])
    assert json.loads(r.lrange("queue:default", 0, -1)[0])["jid"] == jids[0]


@pytest.mark.parametrize("job_choice", [None, False, "other"])
@pytest.mark.parametrize("task_choice", [None, False, "other"])
def test_a_rolled_back_tasks_jobs_go_with_it_and_a_task_written_at_once_keeps_them(
        other_db, r, task_choice, job_choice):
    from django.db import transaction
    from ledger.jobs import SeeOrder
    waits = task_choice is not False and (task_choice or "default") == "other"
    with pytest.raises(Boom):
        with transaction.atomic(using="other"):
            with queued.Task("rt3-1 rollback", after_commit=task_choice) as task:
                SeeOrder.set(after_commit=job_choice).perform_async(1)
            raise Boom()
    # a task that waited for the commit is gone with its job; one written at once keeps it
    assert task_state(r, task) == ((False, None, []) if waits else (True, 1, [task.id]))
    if waits:
        assert r.keys("*") == []


def test_the_red_teams_cases_lose_no_job(other_db, r):
    from django.db import transaction
    from ledger.jobs import SeeOrder
    # A task that writes at once inside a transaction of the default database
    with transaction.atomic():
        with queued.Task("nocommit", after_commit=False) as task:
            jid = SeeOrder.perform_async("row-1")
    assert task_state(r, task) == (True, 1, [task.id])
    assert queued.Task.find(task.id).job(jid)["status"] == "enqueued"
    r.flushdb()
    # A default task inside a transaction of another database, its push waiting for that one
    with transaction.atomic(using="other"):
        with queued.Task("billing") as task:
            SeeOrder.set(after_commit="other").perform_async("invoice-1")
    assert task_state(r, task) == (True, 1, [task.id])
