"""queued.server.recovery: a dead worker's or a dead host's jobs go back to their queues, exactly once.

Jobs are reserved with a real Fetcher (so the members are exactly what workers write), then the
master's recovery steps are called directly.
"""
from __future__ import annotations

import json
import logging
import threading
import time

import pytest
import redis as redis_lib

from queued.server import recovery
from queued.server.reserved import GONE, WRITTEN
from queued.server.running import Running, token_of
from queued.keys import Keys

from conftest import FETCH_IDENTITY, job

K = Keys()
ME = FETCH_IDENTITY  # the make_fetcher fixture's default identity
OTHER = "deadhost:2:def"


def drain(r, queue="default") -> list[bytes]:
    """The queue in the order workers would take it (RPOP)."""
    out = []
    while (item := r.rpop(f"queue:{queue}")) is not None:
        out.append(item)
    return out


# --- register / unregister ------------------------------------------------------------------

def test_register_writes_the_registration_and_the_lease(r):
    recovery.register(r, K, ME, 3, ["critical", "default"], 5000)
    assert json.loads(r.hget(K.masters, ME)) == {"slots": 3, "queues": ["critical", "default"]}
    assert r.get(K.lease(ME)) is not None
    assert 4000 < r.pttl(K.lease(ME)) <= 5000


def test_unregister_removes_both(r):
    recovery.register(r, K, ME, 3, ["default"], 5000)
    recovery.register(r, K, OTHER, 1, ["default"], 5000)
    recovery.unregister(r, K, ME)
    assert r.hkeys(K.masters) == [OTHER.encode()]
    assert not r.exists(K.lease(ME))
    assert r.exists(K.lease(OTHER))


# --- one slot -----------------------------------------------------------------------------------

def test_requeue_slot_puts_reservations_back_earliest_first(r, make_fetcher):
    # Given a slot that reserved jobs 1, 2, 3 and a queue where job 4 waits
    f = make_fetcher()
    r.lpush("queue:default", job(1), job(2), job(3))
    assert len(f.reserve(3)) == 3
    r.lpush("queue:default", job(4))
    # When the worker dies and its slot is requeued
    moved = recovery.requeue_slot(r, K, ME, 0, ["default"])
    # Then 1, 2, 3 run next, in their original order, before 4; the reserved set is gone
    assert moved == 3
    assert drain(r) == [job(1), job(2), job(3), job(4)]
    assert not r.exists(K.reserved(ME, 0))


def test_requeue_slot_sends_each_member_to_its_own_queue(r, make_fetcher):
    f = make_fetcher(queues=("high", "low"))
    r.lpush("queue:high", job(1, "high"))
    r.lpush("queue:low", job(2, "low"), job(3, "low"))
    assert len(f.reserve(3)) == 3
    assert recovery.requeue_slot(r, K, ME, 0, ["high", "low"]) == 3
    assert drain(r, "high") == [job(1, "high")]
    assert drain(r, "low") == [job(2, "low"), job(3, "low")]


def test_requeue_slot_puts_landed_jobs_back(r, make_fetcher):
    # Given a job BLMOVEd into the slot's landing list (the worker died before reserving it)
    f = make_fetcher()
    r.lpush("queue:default", job(1))
    assert f.block() is not None
    r.lpush("queue:default", job(2))
    # When the slot is requeued
    moved = recovery.requeue_slot(r, K, ME, 0, ["default"])
    # Then the landed job is back at the right end: it runs first
    assert moved == 1
    assert drain(r) == [job(1), job(2)]
    assert not r.exists(K.landing(ME, 0, "default"))


def test_requeue_slot_takes_both_reservations_and_landed_jobs(r, make_fetcher):
    f = make_fetcher()
    r.lpush("queue:default", job(1), job(2))
    f.reserve(1)          # 1 reserved
    assert f.block()      # 2 landed
    assert recovery.requeue_slot(r, K, ME, 0, ["default"]) == 2
    assert sorted(drain(r)) == sorted([job(1), job(2)])
    assert r.zcard(K.reserved(ME, 0)) == 0


def test_requeue_slot_leaves_other_slots_alone(r, make_fetcher):
    f0, f1 = make_fetcher(slot=0), make_fetcher(slot=1)
    r.lpush("queue:default", job(1), job(2))
    f0.reserve(1)
    f1.reserve(1)
    assert recovery.requeue_slot(r, K, ME, 0, ["default"]) == 1
    assert r.zcard(K.reserved(ME, 1)) == 1
    assert drain(r) == [job(1)]


def test_requeue_slot_twice_requeues_once(r, make_fetcher):
    f = make_fetcher()
    r.lpush("queue:default", job(1))
    f.reserve(1)
    assert recovery.requeue_slot(r, K, ME, 0, ["default"]) == 1
    assert recovery.requeue_slot(r, K, ME, 0, ["default"]) == 0
    assert drain(r) == [job(1)]


def test_requeue_keeps_identical_payloads_apart(r, make_fetcher):
    f = make_fetcher()
    r.lpush("queue:default", job(5), job(5))
    f.reserve(2)
    assert recovery.requeue_slot(r, K, ME, 0, ["default"]) == 2
    assert drain(r) == [job(5), job(5)]


def test_current_job_is_the_earliest_reservation(r, make_fetcher):
    f = make_fetcher()
    assert recovery.current_job(r, K, ME, 0, ["default"]) is None
    r.lpush("queue:default", job(1), job(2), job(3))
    first, *_ = f.reserve(3)
    cur = recovery.current_job(r, K, ME, 0, ["default"])
    assert cur == first
    assert cur.payload == job(1) and cur.queue == "default"


def test_fail_reservation_moves_the_current_job_to_dead(r, make_fetcher):
    f = make_fetcher()
    r.lpush("queue:default", job(1))
    (res,) = f.reserve(1)
    now = time.time()
    assert recovery.fail_reservation(r, K, ME, 0, res, "dead", now, job(1).decode(),
                                     15552000, 10000) == WRITTEN
    assert r.zrange("dead", 0, -1) == [job(1)]
    assert r.zcard(K.reserved(ME, 0)) == 0
    # the second time the reservation is gone: nothing is written
    assert recovery.fail_reservation(r, K, ME, 0, res, "dead", now, "again", 15552000,
                                     10000) == GONE
    assert r.zcard("dead") == 1


# --- a dead host ------------------------------------------------------------------------------

def _dead_master_with_jobs(r, make_fetcher, identity=OTHER, slots=2):
    """A registered master whose slots hold jobs and whose lease is gone."""
    recovery.register(r, K, identity, slots, ["default"], 60_000)
    r.lpush("queue:default", *(job(i) for i in range(1, 2 * slots + 1)))
    for s in range(slots):
        make_fetcher(identity=identity, slot=s).reserve(2)
    r.delete(K.lease(identity))
    return 2 * slots


def test_reap_expired_requeues_every_slot_of_a_master_without_a_lease(r, make_fetcher):
    # Given a dead master with 4 reserved jobs over 2 slots
    n = _dead_master_with_jobs(r, make_fetcher)
    # When any master reaps
    reaped = recovery.reap_expired(r, K)
    # Then all its jobs are back, its registration and reservations are gone
    assert reaped == [(OTHER, n)]
    assert sorted(drain(r)) == sorted(job(i) for i in range(1, n + 1))
    assert not r.hexists(K.masters, OTHER)
    assert not r.exists(K.reserved(OTHER, 0)) and not r.exists(K.reserved(OTHER, 1))


def test_reap_expired_leaves_a_live_master_alone(r, make_fetcher):
    recovery.register(r, K, ME, 1, ["default"], 60_000)
    r.lpush("queue:default", job(1))
    make_fetcher().reserve(1)
    assert recovery.reap_expired(r, K) == []
    assert r.zcard(K.reserved(ME, 0)) == 1
    assert r.hexists(K.masters, ME)
    assert r.llen("queue:default") == 0


def test_reap_expired_twice_requeues_once(r, make_fetcher):
    n = _dead_master_with_jobs(r, make_fetcher)
    assert recovery.reap_expired(r, K) == [(OTHER, n)]
    assert recovery.reap_expired(r, K) == []
    assert len(drain(r)) == n


def test_reap_expired_by_two_masters_at_once_requeues_once(r, redis_url, make_fetcher):
    # Given several dead masters with jobs
    total = 0
    for i in range(4):
        recovery.register(r, K, f"dead{i}:1:x", 2, ["default"], 60_000)
        r.lpush("queue:default", *(job(100 * i + j) for j in range(4)))
        for s in range(2):
            make_fetcher(identity=f"dead{i}:1:x", slot=s).reserve(2)
        r.delete(K.lease(f"dead{i}:1:x"))
        total += 4
    assert r.llen("queue:default") == 0
    # When two masters reap at the same moment
    barrier = threading.Barrier(2)
    results = []

    def reap():
        client = redis_lib.Redis.from_url(redis_url)
        barrier.wait()
        results.append(recovery.reap_expired(client, K))
        client.close()

    threads = [threading.Thread(target=reap) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    # Then every job is in the queue exactly once, and each master was reaped once
    items = drain(r)
    assert len(items) == total and len(set(items)) == total
    reaped = [identity for result in results for identity, _ in result]
    assert sorted(reaped) == sorted(f"dead{i}:1:x" for i in range(4))
    assert sum(moved for result in results for _, moved in result) == total
    assert r.hlen(K.masters) == 0


def test_reap_expired_uses_the_registered_queues(r, make_fetcher):
    # Given a dead master on two queues: one job reserved from each, one landed on "high"
    recovery.register(r, K, OTHER, 1, ["high", "low"], 60_000)
    f = make_fetcher(identity=OTHER, queues=("high", "low"))
    r.lpush("queue:high", job(1, "high"))
    r.lpush("queue:low", job(2, "low"))
    f.reserve(2)
    r.lpush("queue:high", job(3, "high"))
    assert f.block() is not None  # slot 0 blocks on "high"
    r.delete(K.lease(OTHER))
    # When it is reaped, each job goes back to the queue it came from
    assert recovery.reap_expired(r, K) == [(OTHER, 3)]
    assert sorted(drain(r, "high")) == sorted([job(1, "high"), job(3, "high")])
    assert drain(r, "low") == [job(2, "low")]
    assert not r.exists(K.landing(OTHER, 0, "high"))


@pytest.mark.parametrize("desc", [b"not json", b'{"queues":["default"]}', b"[1,2]",
                                  b'{"slots":"x","queues":["default"]}'])
def test_an_unreadable_registration_is_left_alone_with_an_error(r, make_fetcher, caplog, desc):
    # Given a master without a lease whose registration cannot be read, holding a job
    r.hset(K.masters, OTHER, desc)
    r.lpush("queue:default", job(1))
    make_fetcher(identity=OTHER).reserve(1)
    # and a readable dead master beside it
    n = _dead_master_with_jobs(r, make_fetcher, identity="ok:1:x", slots=1)
    with caplog.at_level(logging.ERROR, logger="queued.recovery"):
        reaped = recovery.reap_expired(r, K)
    # Then the readable one is reaped, the unreadable one is untouched and logged
    assert reaped == [("ok:1:x", n)]
    assert r.hget(K.masters, OTHER) == desc
    assert r.zcard(K.reserved(OTHER, 0)) == 1
    errors = [rec for rec in caplog.records if rec.levelno == logging.ERROR]
    assert len(errors) == 1 and OTHER in errors[0].getMessage()


def test_current_job_is_the_running_one_not_the_earliest(r, make_fetcher):
    # Given a batch of three reserved jobs; the first finished but its ack has not gone out
    f = make_fetcher()
    r.lpush("queue:default", job(1), job(2), job(3))
    first, running, _ = f.reserve(3)
    # When the master asks for the job the slot table names (one job of the batch behind it)
    cur = recovery.current_job(r, K, ME, 0, ["default"], Running(f"{2:024x}", behind=1))
    # Then it gets that job; a jid the slot does not hold gives None
    assert cur == running
    assert recovery.current_job(r, K, ME, 0, ["default"], Running("f" * 24, behind=1)) is None
    assert recovery.current_job(r, K, ME, 0, ["default"]) == first


def test_current_job_matches_a_long_jid_as_the_slot_table_stores_it(r, make_fetcher):
    from queued.server.slots import stored_jid
    f = make_fetcher()
    long_jid = "job-" + "x" * 40
    raw = json.dumps({"class": "X", "args": [], "jid": long_jid}).encode()
    r.lpush("queue:default", b"not json", raw)
    f.reserve(2)
    cur = recovery.current_job(r, K, ME, 0, ["default"], Running(stored_jid(long_jid)))
    assert cur is not None and cur.payload == raw


def same_jid(jid: str, tag: str) -> bytes:
    return json.dumps({"class": "Tagged", "args": [tag], "jid": jid, "queue": "default",
                       "retry": 3}).encode()


def test_a_batchs_running_job_is_found_by_its_place_not_by_its_jid(r, make_fetcher):
    # Given a batch whose finished first job, running second job and third job share one jid,
    # with one more reserved behind (rt2 finding 5: users give jobs fixed jids)
    f = make_fetcher()
    r.lpush("queue:default", same_jid("x" * 24, "finished"), same_jid("x" * 24, "running"),
            same_jid("x" * 24, "later"), job(4))
    finished, running, later, _ = f.reserve(4)
    # When the master looks for the job the slot record names
    cur = recovery.current_job(r, K, ME, 0, ["default"], Running("x" * 24, behind=2))
    # Then it is the running one, neither the first nor the last of that jid
    assert cur == running and cur not in (finished, later)


def test_a_lanes_job_is_found_by_its_reservation_token_not_by_its_jid(r, make_fetcher):
    # Given two jobs of one jid reserved at once (two lanes of a worker of many jobs)
    f = make_fetcher()
    r.lpush("queue:default", same_jid("x" * 24, "one"), same_jid("x" * 24, "two"))
    one, two = f.reserve(2)
    # When the master looks for each by the token its lane's record carries
    found = [recovery.current_job(r, K, ME, 0, ["default"],
                                  Running("x" * 24, token_of(res.member).decode()))
             for res in (two, one)]
    # Then each is its own
    assert found == [two, one]


def test_a_timeout_kill_charges_the_job_past_its_limit_not_another_of_its_jid(r, make_fetcher):
    # Given two lanes running jobs of one jid: an innocent one, and a culprit the master
    # killed the worker for (rt2 finding 5: the innocent was charged, the culprit went back)
    f = make_fetcher()
    r.lpush("queue:default", same_jid("x" * 24, "innocent"), same_jid("x" * 24, "culprit"))
    innocent, culprit = f.reserve(2)
    jobs = [Running("x" * 24, token_of(res.member).decode()) for res in (innocent, culprit)]
    # When the slot is settled after the kill
    settled = recovery.settle(r, K, ME, _cfg(), 0, code=-9, reason="timeout", running=jobs,
                              culprits={jobs[1]: recovery.Charge(1.0)})
    # Then the culprit took the failure path, and the innocent went back as it was
    (entry,) = [json.loads(m) for m in r.zrange("retry", 0, -1)]
    assert entry["args"] == ["culprit"] and entry["error_class"] == "JobTimeout"
    assert r.lrange("queue:default", 0, -1) == [innocent.payload]
    assert (settled.moved, settled.failed) == (1, 1)


def test_a_job_without_a_limit_that_held_the_event_loop_is_charged_with_that(r, make_fetcher):
    # Given an async job with no time limit that held its worker's event loop 3.2 s, past the
    # limits of the jobs waiting on it, and the master killed the worker for it
    f = make_fetcher()
    r.lpush("queue:default", same_jid("b" * 24, "blocker"))
    (blocker,) = f.reserve(1)
    job = Running("b" * 24, token_of(blocker.member).decode())
    recovery.settle(r, K, ME, _cfg(), 0, code=-9, reason="timeout", running=[job],
                    culprits={job: recovery.Charge(0.0, blocked=3.2)})
    # Then its failure says what it did (rt2 finding 7: "ran past its 0s timeout")
    (entry,) = [json.loads(m) for m in r.zrange("retry", 0, -1)]
    assert entry["error_class"] == "JobTimeout"
    assert entry["error_message"] == (
        "Tagged blocked its worker's event loop for 3.2s (an async job must await, never "
        "block), past the time limits of the async jobs waiting on it; its worker was killed")


class _StaleLeaseView:
    """A client whose lease check (the pipelined EXISTS) answers from an old snapshot: "no
    lease". Everything else, the requeue script included, goes to the real Redis."""

    def __init__(self, r):
        self._r = r

    def __getattr__(self, name):
        return getattr(self._r, name)

    def pipeline(self, *args, **kwargs):
        return _StalePipe()


class _StalePipe:
    def __init__(self):
        self.n = 0

    def exists(self, *keys):
        self.n += 1

    def execute(self):
        return [0] * self.n


def test_a_master_that_renewed_its_lease_after_the_check_is_left_alone(r, make_fetcher):
    # Given a live master whose lease check came back "expired" a moment before it renewed
    recovery.register(r, K, OTHER, 1, ["default"], 60_000)
    r.lpush("queue:default", job(1))
    make_fetcher(identity=OTHER).reserve(1)
    # When another master reaps on that stale answer
    reaped = recovery.reap_expired(_StaleLeaseView(r), K)
    # Then the requeue itself checks the lease in Redis and touches nothing
    assert reaped == []
    assert r.zcard(K.reserved(OTHER, 0)) == 1
    assert r.llen("queue:default") == 0
    assert r.hexists(K.masters, OTHER)


# --- a queue key of the wrong type ---------------------------------------------------------------
# RPUSH onto a key that is not a list fails with WRONGTYPE; before, that aborted requeue.lua,
# so the slot was never emptied and its recovery failed on every try, for ever.

def test_a_job_whose_queue_key_is_not_a_list_goes_to_dead_and_the_rest_go_back(
        r, make_fetcher, caplog):
    # Given a slot holding a job from "broken", a job from "default", and a landed job from
    # "broken", after which queue:broken was overwritten with a string
    f = make_fetcher(queues=("broken", "default"))
    r.lpush("queue:broken", job(1, "broken"))
    r.lpush("queue:default", job(2, "default"))
    assert len(f.reserve(2)) == 2
    r.lpush("queue:broken", job(3, "broken"))
    assert f.block() is not None  # slot 0 blocks on "broken": job 3 is in its landing list
    r.set("queue:broken", "x")
    before = r.time()[0]
    # When the slot is requeued
    with caplog.at_level(logging.ERROR, logger="queued.recovery"):
        moved = recovery.requeue_slot(r, K, ME, 0, ["broken", "default"])
    # Then the default job is back in its queue, the two others are in dead as they were,
    # at Redis's current time, and the slot is empty
    assert moved == 1
    assert drain(r, "default") == [job(2, "default")]
    dead = r.zrange(K.dead, 0, -1, withscores=True)
    assert sorted(m for m, _ in dead) == sorted([job(1, "broken"), job(3, "broken")])
    assert all(before - 1 <= s <= before + 5 for _, s in dead)
    assert r.get("queue:broken") == b"x"
    assert not r.exists(K.reserved(ME, 0)) and not r.exists(K.landing(ME, 0, "broken"))
    assert [x.getMessage() for x in caplog.records] == [
        f"2 job(s) of {ME} could not be put back: their queue key holds another Redis type, "
        "not a list (WRONGTYPE); sent to dead as they were"]


def test_reap_expired_sends_a_job_whose_queue_key_is_not_a_list_to_dead(r, make_fetcher):
    recovery.register(r, K, OTHER, 1, ["broken", "default"], 60_000)
    f = make_fetcher(identity=OTHER, queues=("broken", "default"))
    r.lpush("queue:broken", job(1, "broken"))
    r.lpush("queue:default", job(2, "default"))
    assert len(f.reserve(2)) == 2
    r.set("queue:broken", "x")
    r.delete(K.lease(OTHER))
    assert recovery.reap_expired(r, K) == [(OTHER, 1)]
    assert drain(r, "default") == [job(2, "default")]
    assert r.zrange(K.dead, 0, -1) == [job(1, "broken")]
    assert not r.hexists(K.masters, OTHER)


# --- settle: the job a worker died under ------------------------------------------------------

def _cfg(**over):
    from queued import config
    return config.from_dict({"queues": ["default"], "max_crashes": 3, **over})


def _running(r, make_fetcher, payload: bytes):
    f = make_fetcher()
    r.lpush("queue:default", payload)
    (res,) = f.reserve(1)
    return res, json.loads(payload)["jid"]


def test_a_crash_sends_the_job_back_carrying_its_count_in_the_payload(r, make_fetcher):
    # Given a slot whose worker died (SIGKILL) under a job a PHP producer wrote by hand
    raw = b'{"class": "X", "args": ["a\\/b"], "jid": "0000000000000000000000aa"}'
    res, jid = _running(r, make_fetcher, raw)
    # When the master settles it, and the next run of the job kills its worker too
    settled = recovery.settle(r, K, ME, _cfg(), 0, code=-9, reason="crash", running_jid=jid)
    assert settled == (1, 0, ())
    (again,) = r.lrange("queue:default", 0, -1)
    # Then the job went back with the count appended to the producer's own bytes, and the
    # next crash counts from there; no key outlives it (queued:crashes:<jid> did, for a week)
    assert again == raw[:-1] + b',"queued_crashes":1}'
    r.delete("queue:default")
    res, _ = _running(r, make_fetcher, again)
    recovery.settle(r, K, ME, _cfg(), 0, code=-9, reason="crash", running_jid=jid)
    assert json.loads(r.lpop("queue:default"))["queued_crashes"] == 2
    assert r.keys("queued:crashes:*") == []


def test_the_crash_that_reaches_max_crashes_sends_the_job_to_dead(r, make_fetcher):
    raw = job(5)[:-1] + b',"queued_crashes":2}'
    res, jid = _running(r, make_fetcher, raw)
    settled = recovery.settle(r, K, ME, _cfg(), 0, code=-11, reason="crash", running_jid=jid)
    assert settled == (0, 1, ())
    (dead,) = [json.loads(m) for m in r.zrange("dead", 0, -1)]
    assert dead["error_class"] == "WorkerKilled" and "3 times" in dead["error_message"]
    # (kicked back from dead, it starts afresh)
    assert "queued_crashes" not in dead


def test_a_run_that_ends_normally_ends_the_streak_of_crashes(r):
    from queued.server import retry
    msg = json.loads(job(1)[:-1] + b',"queued_crashes":2,"retry":3}')
    outcome = retry.decide(msg, RuntimeError("x"), "default")
    assert outcome.kind == "retry" and "queued_crashes" not in outcome.msg


def test_a_settle_retried_after_an_error_counts_the_crash_once(r, make_fetcher, monkeypatch):
    # Given a settle whose requeue failed (Redis went away mid-way)
    res, jid = _running(r, make_fetcher, job(1))
    real = recovery.requeue_slot

    def broken(*args, **kwargs):
        raise redis_lib.ConnectionError("gone")

    monkeypatch.setattr(recovery, "requeue_slot", broken)
    with pytest.raises(redis_lib.ConnectionError):
        recovery.settle(r, K, ME, _cfg(), 0, code=-9, reason="crash", running_jid=jid)
    # When the master settles it again
    monkeypatch.setattr(recovery, "requeue_slot", real)
    recovery.settle(r, K, ME, _cfg(), 0, code=-9, reason="crash", running_jid=jid)
    # Then the crash counted once (a separate INCR could count it twice)
    assert json.loads(r.lpop("queue:default"))["queued_crashes"] == 1


def test_a_killed_activejob_job_uses_the_wrapped_classs_hooks(r, make_fetcher):
    # Given a registered job class serving Rails' "WrappedHook" with its own retry_in, and an
    # ActiveJob payload of it killed by the master at its timeout
    import queued
    from queued.job import registry

    class WrappedHook(queued.Job):
        queued_options = {"name": "WrappedHook", "retry": 5}

        @classmethod
        def retry_in(cls, count, exc):
            return 5000

    try:
        raw = json.dumps({"class": "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper",
                          "wrapped": "WrappedHook", "queue": "default", "retry": True,
                          "args": [{"job_class": "WrappedHook", "arguments": []}],
                          "jid": "ab" * 12}).encode()
        res, jid = _running(r, make_fetcher, raw)
        before = time.time()
        recovery.settle(r, K, ME, _cfg(), 0, code=-9, reason="timeout", running_jid=jid,
                        timeout=1.0)
        # Then its retry is scheduled by WrappedHook.retry_in (5000 s + jitter), not by the
        # default formula of an unknown wrapper class (15 s + jitter)
        ((member, score),) = r.zrange("retry", 0, -1, withscores=True)
        assert before + 5000 <= score <= time.time() + 5000 + 10
    finally:
        registry.unregister("WrappedHook")
