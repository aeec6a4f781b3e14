"""A SQLAlchemy engine made in the master (tests/sqlajobs.py), on the session's PostgreSQL:
with the documented ``worker_start`` hook (``engine.dispose(close=False)``) each worker makes
its own pool and no connection crosses a fork; without it a worker talks on the master's."""
import json

from harness import wait_for


def notes(r, key):
    return [json.loads(x) for x in r.lrange(key, 0, -1)]


def push_many(r, n):
    r.sadd("queues", "default")
    r.lpush("queue:default", *[json.dumps({"class": "SaBackend", "args": [], "retry": True,
                                           "queue": "default", "jid": f"{i:024x}"})
                               for i in range(n)])


def start(daemon, postgres_server, concurrency, hook):
    postgres_server.create_database("queued_sqla")
    return daemon(require=("sqlajobs.py",), concurrency=concurrency, env={
        "QUEUED_TEST_SQLA_URL": postgres_server.url("queued_sqla"),
        "QUEUED_TEST_SQLA_HOOK": "1" if hook else "0"})


def test_the_worker_start_hook_remakes_the_pool_and_no_connection_crosses_a_fork(
        daemon, postgres_server, r):
    # Given a master whose pool holds a connection at the fork, and the hook
    d = start(daemon, postgres_server, 2, hook=True)
    workers = set(wait_for(lambda: len(d.worker_pids()) == 2 and d.worker_pids(), 10,
                           what="two workers"))
    (master,) = notes(r, "t:sa:master")
    assert master["pooled"] == 1
    # When the workers run jobs through the engine
    push_many(r, 40)
    wait_for(lambda: len(notes(r, "t:sa:backends")) == 40, 20, what="40 jobs")
    by_worker = {}
    for n in notes(r, "t:sa:backends"):
        by_worker.setdefault(n["pid"], set()).add(n["backend"])
    # Then each worker found the inherited connection in its pool and dropped it, and talked
    # to backends of its own, never the master's
    starts = notes(r, "t:sa:worker_start")
    assert {n["pid"] for n in starts} == workers
    assert {(n["inherited"], n["pooled"]) for n in starts} == {(1, 0)}
    assert set(by_worker) <= workers
    for pid, backends in by_worker.items():
        assert master["backend"] not in backends
    owners = [b for bs in by_worker.values() for b in bs]
    assert len(owners) == len(set(owners))
    # And the master's own pooled connection still works (the children did not close it)
    beats = len(notes(r, "t:sa:master_beat"))
    wait_for(lambda: len(notes(r, "t:sa:master_beat")) > beats, 10, what="a heartbeat")
    assert all(n["ok"] for n in notes(r, "t:sa:master_beat")), notes(r, "t:sa:master_beat")
    assert master["backend"] in {n["backend"] for n in notes(r, "t:sa:master_beat")}
    assert d.stop() == 0


def test_without_the_hook_a_worker_talks_on_the_masters_connection(daemon, postgres_server, r):
    # Given the same engine and no hook (one worker: two on one socket could hang)
    d = start(daemon, postgres_server, 1, hook=False)
    (master,) = notes(r, "t:sa:master")
    push_many(r, 1)
    wait_for(lambda: notes(r, "t:sa:backends"), 10, what="the job")
    (ran,) = notes(r, "t:sa:backends")
    # Then it used the master's session: the hazard the hook exists for
    assert ran["pid"] != master["pid"] and ran["backend"] == master["backend"]
    assert d.stop() == 0
