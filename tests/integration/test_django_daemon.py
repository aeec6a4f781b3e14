"""A real daemon inside the test Django project (tests/djangoproj) on the session's PostgreSQL:
jobs found by autodiscovery, pushes that wait for the commit, database connections that never
cross a fork, and 1,000 jobs reading and writing rows through a kill -9, a HUP and recycling.
"""
import json
import os
import signal

import pytest

from djangosite import PROJECT
from harness import wait_for, zjobs


def notes(r, key):
    return [json.loads(x) for x in r.lrange(key, 0, -1)]


@pytest.fixture
def django_daemon(daemon, django_db):
    """``django_daemon(env=..., **settings)``: a daemon of the project (DJANGO_SETTINGS_MODULE,
    no -r: its jobs are found by autodiscovery), run from the project's folder."""
    def start(*extra, env=None, **settings):
        return daemon(*extra, require=(), cwd=PROJECT, env=django_db.env(**(env or {})),
                      **settings)
    return start


def test_a_pushed_job_sees_the_row_its_transaction_committed(django_daemon, r, after_commit,
                                                            default_client):
    from django.db import transaction
    from ledger.jobs import SeeOrder
    from ledger.models import Order
    d = django_daemon(concurrency=1)
    # (found, not -r'd; and logged although the LOGGING of the settings disables the loggers
    # that exist when Django applies it: queued turns its own back on)
    assert "jobs: Backend, Remember, SeeOrder, SlowQuery, Touch" in d.output()
    # Given a job pushed with after_commit=False inside an open transaction
    with transaction.atomic():
        early = Order.objects.create(ref="early")
        hasty = SeeOrder.set(after_commit=False).perform_async(early.pk)
        # Then it runs while the transaction is still open, and misses the row
        wait_for(lambda: notes(r, "t:dj:seen"), 10, what="the hasty job")
    # When a job is pushed by default inside a transaction the daemon could serve at once,
    # and another one after it with after_commit=False
    with transaction.atomic():
        order = Order.objects.create(ref="A-1")
        jid = SeeOrder.perform_async(order.pk)
        behind = SeeOrder.set(after_commit=False).perform_async(order.pk)
        # Then the one behind runs (the only worker takes a queue in order), the default one
        # has not: it is in no queue and no worker's hands until the commit
        wait_for(lambda: behind in {n["jid"] for n in notes(r, "t:dj:seen")}, 10,
                 what="the job pushed behind it")
        assert [n["jid"] for n in notes(r, "t:dj:seen")] == [hasty, behind]
        assert not r.exists("queue:default")
        assert not any(jid.encode() in m for k in r.scan_iter("queued:reserved:*")
                       for m in r.zrange(k, 0, -1))
    # And it is pushed once the commit is done, and its job sees the row
    wait_for(lambda: len(notes(r, "t:dj:seen")) == 3, 10, what="the job")
    seen = {n["jid"]: n for n in notes(r, "t:dj:seen")}
    assert (seen[hasty]["order_id"], seen[hasty]["found"]) == (early.pk, False)
    assert (seen[jid]["order_id"], seen[jid]["found"]) == (order.pk, True)
    assert (seen[behind]["order_id"], seen[behind]["found"]) == (order.pk, False)
    assert [n["jid"] for n in notes(r, "t:dj:seen")] == [hasty, behind, jid]
    assert seen[jid]["pid"] in d.worker_pids()
    assert d.stop() == 0


def test_the_masters_open_connection_never_reaches_a_worker(django_daemon, r):
    # Given a master that queries the database before it forks its workers (a startup
    # handler), so its connection is open at the fork, and again on every heartbeat
    d = django_daemon(concurrency=2, env={"QUEUED_TEST_MASTER_DB": "1"})
    workers = set(wait_for(lambda: len(d.worker_pids()) == 2 and d.worker_pids(), 10,
                           what="two workers"))
    (master,) = notes(r, "t:dj:master")
    # When the workers run jobs that ask which database backend serves them
    r.sadd("queues", "default")
    for i in range(40):
        r.lpush("queue:default", json.dumps({"class": "Backend", "args": [], "queue": "default",
                                             "jid": f"{i:024x}", "retry": True}))
    wait_for(lambda: len(notes(r, "t:dj:backends")) == 40, 20, what="40 jobs")
    ran = notes(r, "t:dj:backends")
    by_worker = {}
    for n in ran:
        by_worker.setdefault(n["pid"], set()).add(n["backend"])
    # Then every worker talked to a backend of its own, never the master's
    assert set(by_worker) <= workers and len(by_worker) >= 1
    assert master["pid"] == d.pid
    for pid, backends in by_worker.items():
        assert master["backend"] not in backends, (pid, backends, master)
    assert all(len(b) == 1 for b in by_worker.values())  # (kept across jobs: CONN_MAX_AGE)
    owners = [b for bs in by_worker.values() for b in bs]
    assert len(owners) == len(set(owners))
    # And the master's own connection kept working on every heartbeat
    beats = len(notes(r, "t:dj:master_beat"))
    wait_for(lambda: len(notes(r, "t:dj:master_beat")) > beats, 10, what="a later heartbeat")
    assert d.stop() == 0
    assert all(n["ok"] for n in notes(r, "t:dj:master_beat")), notes(r, "t:dj:master_beat")
    assert "Error" not in d.output() and zjobs(r, "retry") == []


def test_a_job_stopped_by_its_timeout_in_a_query_leaves_no_broken_connection(django_daemon, r):
    # Given one worker with persistent connections
    d = django_daemon(concurrency=1)
    r.sadd("queues", "default")

    def push(cls, jid):
        r.lpush("queue:default", json.dumps({"class": cls, "args": [], "queue": "default",
                                             "jid": jid, "retry": 1}))
    # When a job is stopped by its timeout in the middle of a query, and jobs follow it
    push("SlowQuery", "a" * 24)
    wait_for(lambda: r.zcard("retry") == 1, 15, what="the timeout")
    push("Backend", "b" * 24)
    push("Backend", "c" * 24)
    wait_for(lambda: len(notes(r, "t:dj:backends")) == 2, 10, what="the jobs after it")
    assert d.stop() == 0
    # Then the stopped job is a timeout, and the next jobs ran on a fresh connection
    (failed,) = zjobs(r, "retry")
    assert failed["error_class"] == "JobTimeout"
    (slow,) = notes(r, "t:dj:slow")
    assert {n["backend"] for n in notes(r, "t:dj:backends")} != {slow["backend"]}
    assert len({n["backend"] for n in notes(r, "t:dj:backends")}) == 1
    assert "another command is already in progress" not in d.output()


def test_a_thousand_jobs_read_and_write_rows_through_kill_hup_and_recycling(django_daemon, r):
    from ledger.models import Item
    Item.objects.bulk_create([Item(n=n) for n in range(1000)])
    # Given three workers that each leave after about 120 jobs (recycling)
    d = django_daemon(concurrency=3, max_jobs=100, max_jobs_jitter=40, prefetch=2)
    r.sadd("queues", "default")
    r.lpush("queue:default", *[json.dumps({"class": "Touch", "args": [n], "queue": "default",
                                           "jid": f"{n:024x}", "retry": True})
                               for n in range(1000)])

    def done():
        return Item.objects.filter(runs__gt=0).count()
    # When a worker is killed with SIGKILL mid-run, and the master gets a HUP later
    wait_for(lambda: done() >= 200, 60, what="200 jobs")
    busy = [pid for pid in d.worker_pids()]
    os.kill(busy[0], signal.SIGKILL)
    wait_for(lambda: done() >= 450, 60, what="450 jobs")
    before_hup = set(d.worker_pids())
    d.signal(signal.SIGHUP)
    d.wait_log("rolling restart done", 60)
    # (every worker of before the HUP is gone: replaced, or recycled meanwhile)
    assert not before_hup & set(d.worker_pids())
    wait_for(lambda: done() == 1000 and r.llen("queue:default") == 0, 120, what="1,000 jobs")
    assert d.stop() == 0
    # Then every job ran, none failed, and only jobs of the killed worker's batch ran twice:
    # at most its prefetch of 2 (the job it was running, and one it had finished whose ack
    # was still on its way: an ack rides with the worker's next Redis call, and reliable fetch
    # runs a job again rather than lose it)
    runs = list(Item.objects.values_list("runs", flat=True))
    assert min(runs) == 1 and sum(runs) - 1000 <= 2
    assert zjobs(r, "retry") == [] and zjobs(r, "dead") == []
    assert int(r.get("stat:processed")) >= 1000
    # And no database connection was ever shared: each backend served one worker process
    owners = {}
    for worker, backend in Item.objects.values_list("worker_pid", "backend_pid"):
        owners.setdefault(backend, set()).add(worker)
    assert all(len(workers) == 1 for workers in owners.values()), owners
    # And each worker left after at most max_jobs + jitter (140) jobs: at least 8 of them ran
    # the 1,000 (recycling alone; the kill and the HUP add more)
    per_worker = {}
    for worker in Item.objects.values_list("worker_pid", flat=True):
        per_worker[worker] = per_worker.get(worker, 0) + 1
    assert max(per_worker.values()) <= 140, per_worker
    assert len(per_worker) >= 8, per_worker
    log = d.output()
    for symptom in ("OperationalError", "InterfaceError", "server closed the connection",
                    "SSL", "Traceback"):
        assert symptom not in log, symptom
