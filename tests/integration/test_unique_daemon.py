"""Unique jobs with real daemons (issue 21): one of many concurrent pushes survives, the lock
is held while the job is pending (queued, recovered after a crash, waiting to retry) and goes
when it ends for good (success, death), a crash never leaves it behind, and a foreign
producer's duplicates never run at once."""
import json
import threading
import time

import limitjobs as lj
import queued
from harness import counts, wait_for, zjobs
from queued import payload, unique
from queued.keys import Keys

REQUIRE = ("limitjobs.py",)


def lock_of(r, klass, args, queue="default"):
    """(the key, the jid holding it or None) of the lock of a (class, queue, args)."""
    key = Keys().unique(unique.digest({"class": klass, "queue": queue, "args": args}))
    holder = r.get(key)
    return key, holder.decode() if holder else None


def counter(r, name):
    return int(r.get(Keys().counter(name)) or 0)


def test_a_hundred_concurrent_pushes_of_one_unique_job_leave_exactly_one(
        daemon, redis_url, producer, r):
    # Given 100 producers, each with its own connection, pushing the same job at once
    clients = [queued.Client(url=redis_url) for _ in range(100)]
    start = threading.Barrier(100)
    results = [None] * 100

    def push(i):
        start.wait()
        results[i] = clients[i].push({"class": lj.Unique, "args": ["only", "g1"]})

    threads = [threading.Thread(target=push, args=(i,)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then exactly one push went in: one jid, one job in the queue, one lock held by it, and
    # 99 duplicates dropped and counted
    pushed = [jid for jid in results if jid is not None]
    assert len(pushed) == 1
    (payload,) = r.lrange("queue:default", 0, -1)
    assert json.loads(payload)["jid"] == pushed[0]
    assert lock_of(r, "Unique", ["only", "g1"])[1] == pushed[0]
    assert counter(r, "unique_dropped") == 99
    # And a daemon runs it exactly once; while it runs, a push is still a duplicate
    d = daemon(concurrency=2, require=REQUIRE)
    wait_for(lambda: counts(r, lj.RUNS).get(pushed[0]) == 1, 10, what="the job to start")
    assert clients[0].push({"class": lj.Unique, "args": ["only", "g1"]}) is None
    r.set(lj.GATE + "g1", 1)
    wait_for(lambda: counts(r, lj.DONE).get(pushed[0]) == 1, 10, what="the job to end")
    # Once it succeeded its lock is gone, long before its 60 s: the next push goes in
    wait_for(lambda: lock_of(r, "Unique", ["only", "g1"])[1] is None, 5,
             what="the lock released at success")
    again = lj.Unique.perform_async("only", "g1")
    assert again is not None
    wait_for(lambda: counts(r, lj.DONE).get(again) == 1, 10, what="the next one to run")
    assert counts(r, lj.RUNS) == {pushed[0]: 1, again: 1}
    for c in clients:
        c.redis.close()
    assert d.stop() == 0


def test_the_lock_of_a_job_whose_worker_is_killed_stays_while_it_is_pending_then_goes(
        daemon, producer, r):
    # Given a unique job (60 s) that SIGKILLs its worker on its first run, then waits on a gate
    d = daemon(concurrency=1, require=REQUIRE)
    jid = lj.UniqueCrash.perform_async("k9", 1, "k9")
    # When the master has put it back and it runs again (its second run waits on the gate)
    wait_for(lambda: counts(r, lj.RUNS).get(jid) == 2, 15, what="the run after the kill")
    assert "killed by SIGKILL" in d.output()
    # Then it still holds its lock: it is the same pending job, so a push is a duplicate
    assert lock_of(r, "UniqueCrash", ["k9", 1, "k9"])[1] == jid
    assert lj.UniqueCrash.perform_async("k9", 1, "k9") is None
    # And once it succeeds the lock goes (within the 10 s waited: long before its 60 s)
    r.set(lj.GATE + "k9", 1)
    wait_for(lambda: lock_of(r, "UniqueCrash", ["k9", 1, "k9"])[1] is None, 10,
             what="the lock to go at its success")
    assert lj.UniqueCrash.perform_async("k9", 0) is not None
    assert d.stop() == 0


def test_a_poison_pill_sent_to_dead_by_the_master_gives_its_lock_up(daemon, producer, r):
    # Given a unique job that kills its worker every time, and a master that buries it after
    # one crash
    d = daemon(concurrency=1, max_crashes=1, require=REQUIRE)
    jid = lj.UniqueCrash.perform_async("pill", 1000)
    (dead,) = wait_for(lambda: zjobs(r, "dead"), 15, what="the poison pill in dead")
    assert dead["jid"] == jid and dead["error_class"] == "WorkerKilled"
    # Then its lock went with it: a new push of the same job goes in at once, long before
    # the lock's 60 s were up (sidekiq-unique-jobs left such locks for ever)
    assert lock_of(r, "UniqueCrash", ["pill", 1000])[1] is None
    assert lj.UniqueCrash.perform_async("pill", 1000) is not None
    d.stop()


def test_a_job_waiting_to_retry_keeps_its_lock_and_its_death_releases_it(
        daemon, producer, r):
    d = daemon(concurrency=1, require=REQUIRE)
    jid = lj.UniqueFails.perform_async("r1")
    # While it waits in retry (its first run failed), it holds its lock: no duplicate
    (waiting,) = wait_for(lambda: zjobs(r, "retry"), 10, what="the job in retry")
    assert waiting["jid"] == jid
    assert lock_of(r, "UniqueFails", ["r1"])[1] == jid
    assert lj.UniqueFails.perform_async("r1") is None
    # Its retry runs under its own lock (never a conflict with itself), fails, and it dies:
    # then the lock goes
    (dead,) = wait_for(lambda: zjobs(r, "dead"), 15, what="the job in dead")
    assert dead["jid"] == jid and counts(r, lj.RUNS)[jid] == 2
    assert lock_of(r, "UniqueFails", ["r1"])[1] is None
    assert lj.UniqueFails.perform_async("r1") is not None
    assert d.stop() == 0


def test_unique_until_start_lets_a_copy_in_once_the_job_has_started(daemon, producer, r):
    # Both pushes come before the daemon starts, so the first is surely still pending (no
    # worker can have started it between them, however loaded the machine)
    first = lj.UniqueUntilStart.perform_async("s", "s1")
    assert lj.UniqueUntilStart.perform_async("s", "s1") is None  # pending: a duplicate
    d = daemon(concurrency=1, require=REQUIRE)
    wait_for(lambda: counts(r, lj.RUNS).get(first) == 1, 10, what="the job to start")
    # It started: its lock went then, so a copy may be pushed while it runs
    assert lock_of(r, "UniqueUntilStart", ["s", "s1"])[1] is None
    second = lj.UniqueUntilStart.perform_async("s", "s1")
    assert second is not None
    r.set(lj.GATE + "s1", 1)
    wait_for(lambda: counts(r, lj.DONE) == {first: 1, second: 1}, 10, what="both to run")
    assert d.stop() == 0


def test_a_foreign_producers_duplicates_never_run_at_the_same_time(daemon, producer, r):
    # Given two copies of one unique job pushed by a producer that takes no lock (Ruby's
    # client, a PHP script: the payload carries unique_for and nothing else)
    def raw(jid):
        return json.dumps({"class": "Unique", "args": ["php", "g2"], "queue": "default",
                           "unique_for": 60, "jid": jid, "retry": 1,
                           "created_at": time.time(), "enqueued_at": time.time()})

    producer.push_raw("default", raw("a" * 24))
    producer.push_raw("default", raw("b" * 24))
    # When two workers take them (one each: which of the two reaches the lock first is a
    # race between the workers, so the test follows whichever did)
    d = daemon(concurrency=2, require=REQUIRE)
    started = wait_for(lambda: list(counts(r, lj.RUNS)), 10, what="the first to start")
    a = started[0]
    b = ({"a" * 24, "b" * 24} - {a}).pop()
    # Then the second did not start beside it: it found the lock the first took as it
    # started, and was put off (scheduled again, no failure), counted
    (put_off,) = wait_for(lambda: zjobs(r, "schedule"), 10, what="the copy put off")
    assert put_off["jid"] == b and counts(r, lj.RUNS) == {a: 1}
    key, holder = lock_of(r, "Unique", ["php", "g2"])
    assert holder == a and 55_000 < r.pttl(key) <= 60_000  # (held for its unique_for, 60 s)
    # And when it comes back while the first still runs (within DEFER_MAX, 5 s), it is put off
    # again, not started
    wait_for(lambda: counter(r, "unique_deferred") >= 2 or b in counts(r, lj.RUNS), 15,
             what="the copy to come back")
    assert b not in counts(r, lj.RUNS)
    assert lock_of(r, "Unique", ["php", "g2"])[1] == a
    assert r.zcard("retry") == 0
    # Once the first is done, the second runs: never at the same time, its start is after
    # the first one's end
    r.set(lj.GATE + "g2", 1)
    wait_for(lambda: counts(r, lj.DONE) == {a: 1, b: 1}, 20,
             what="the second to run after the first")
    assert r.lrange(lj.EVENTS, 0, -1) == [f"{e} {j}".encode() for j in (a, b)
                                          for e in ("enter", "exit")]
    wait_for(lambda: lock_of(r, "Unique", ["php", "g2"])[1] is None, 5,
             what="each to release its lock at its success")
    assert d.stop() == 0


def test_a_copy_without_a_queue_key_shares_the_lock_of_its_twin(daemon, producer, r):
    # Given a unique job pushed by queued's client (its lock taken at the push, digest of
    # [class, "default", args]), and a foreign copy of it without a "queue" key in the same
    # queue (a hand-written push: Sidekiq's server runs it in the queue it was taken from)
    twin = lj.Unique.perform_async("noqueue", "g5")
    producer.push_raw("default", json.dumps({"class": "Unique", "args": ["noqueue", "g5"],
                                             "unique_for": 60, "jid": "d" * 24}))
    # When both are taken by two workers
    d = daemon(concurrency=2, require=REQUIRE)
    wait_for(lambda: counts(r, lj.RUNS).get(twin) == 1, 10, what="the twin to start")
    # Then the copy finds the twin's lock (its digest from the queue it was taken from:
    # before, [class, null, args] named another lock and both ran at once) and is put off
    (put_off,) = wait_for(lambda: zjobs(r, "schedule"), 10, what="the copy put off")
    assert put_off["jid"] == "d" * 24 and "d" * 24 not in counts(r, lj.RUNS)
    assert put_off["unique_digest"] == unique.digest({"class": "Unique", "queue": "default",
                                                      "args": ["noqueue", "g5"]})
    # And it runs once the twin is done, after it
    r.set(lj.GATE + "g5", 1)
    wait_for(lambda: counts(r, lj.DONE) == {twin: 1, "d" * 24: 1}, 20,
             what="the copy to run after the twin")
    assert [json.loads(m)["jid"] for m in r.lrange(lj.MSGS, 0, -1)] == [twin, "d" * 24]
    wait_for(lambda: lock_of(r, "Unique", ["noqueue", "g5"])[1] is None, 5,
             what="each to release its lock at its success")
    assert d.stop() == 0


def test_two_identical_copies_without_a_jid_never_run_at_the_same_time(daemon, producer, r):
    # Given the same bytes pushed twice by a producer that writes no jid: each is run under a
    # jid made from its bytes, the same for both
    raw = json.dumps({"class": "Unique", "args": ["nojid", "g6"], "queue": "default",
                      "unique_for": 60})
    producer.push_raw("default", raw)
    producer.push_raw("default", raw)
    derived = payload.derived_jid(raw.encode())
    # When two workers take them
    d = daemon(concurrency=2, require=REQUIRE)
    wait_for(lambda: counts(r, lj.RUNS).get(derived), 10, what="the first to start")
    # Then the second did not start beside it (before, each took the lock as its own: both
    # ran at once): the lock names the run that holds it, and the copy is put off under a
    # jid of its own
    (put_off,) = wait_for(lambda: zjobs(r, "schedule"), 10, what="the copy put off")
    assert put_off["jid"] != derived and counts(r, lj.RUNS) == {derived: 1}
    assert lock_of(r, "Unique", ["nojid", "g6"])[1].startswith(derived + ":")
    # And once the first is done the copy runs, after it; every lock is given up
    r.set(lj.GATE + "g6", 1)
    wait_for(lambda: counts(r, lj.DONE) == {derived: 1, put_off["jid"]: 1}, 20,
             what="the copy to run after the first")
    assert [json.loads(m)["jid"] for m in r.lrange(lj.MSGS, 0, -1)] == [derived,
                                                                        put_off["jid"]]
    wait_for(lambda: lock_of(r, "Unique", ["nojid", "g6"])[1] is None, 5,
             what="each to release its lock at its success")
    assert d.stop() == 0
