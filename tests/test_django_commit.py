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
