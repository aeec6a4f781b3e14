"""Keys of the wrong Redis type never cost a job: every Lua script checks the types it will
write before its first write (Redis does not roll a script back), and leaves a job where it
was, reserved or scheduled, when it has nowhere to go. (The scheduler's side is in
tests/test_scheduler.py; real daemons in tests/faults/test_wrong_type_targets.py.)
"""
from __future__ import annotations

import json
import time

import pytest

from queued.server import recovery
from queued.server.reserved import GONE, REFUSED, WRITTEN
from queued.keys import Keys

from conftest import FETCH_IDENTITY, job

K = Keys()
ME = FETCH_IDENTITY
RESERVED = K.reserved(ME, 0)


@pytest.mark.parametrize("kind", ["retry", "dead"])
def test_a_failure_whose_target_holds_another_type_keeps_the_job_reserved(r, make_fetcher, kind):
    # Given a reserved job and its failure target overwritten with a string
    f = make_fetcher()
    r.lpush("queue:default", job(1))
    (res,) = f.reserve(1)
    r.set(kind, "oops")
    # When the failure is written
    assert f.fail(res, kind, time.time() + 60, '{"failed":1}') == REFUSED
    # Then nothing is lost: the job is still reserved (marked -1), the string untouched
    # (fail.lua used to ZREM the reservation first, then the ZADD failed: gone)
    assert r.zrange(RESERVED, 0, -1, withscores=True) == [(res.member, -1.0)]
    assert r.get(kind) == b"oops"
    # And it is not handed out again by the next reserve (it would run again and again)
    r.lpush("queue:default", job(2))
    assert [g.payload for g in f.reserve(5)] == [job(2)]
    # And once the key is fixed the same write goes through, exactly once
    r.delete(kind)
    assert f.fail(res, kind, time.time() + 60, '{"failed":1}') == WRITTEN
    assert r.zrange(kind, 0, -1) == [b'{"failed":1}']
    assert f.fail(res, kind, time.time() + 60, '{"failed":1}') == GONE
    f.flush()
    assert [m.split(b"\0")[-1] for m in r.zrange(RESERVED, 0, -1)] == [job(2)]


def test_a_drop_needs_no_target(r, make_fetcher):
    f = make_fetcher()
    r.lpush("queue:default", job(1))
    (res,) = f.reserve(1)
    r.set("retry", "oops")
    assert f.fail(res, "drop", time.time(), job(1)) == WRITTEN
    assert r.zcard(RESERVED) == 0


def test_a_refused_failure_goes_back_to_its_queue_if_its_worker_dies(r, make_fetcher):
    # Given a job whose failure was refused (marked -1 in the slot)
    f = make_fetcher()
    r.lpush("queue:default", job(1))
    (res,) = f.reserve(1)
    r.set("retry", "oops")
    assert f.fail(res, "retry", time.time(), "x") == REFUSED
    # When the worker dies and the master requeues its slot
    assert recovery.requeue_slot(r, K, ME, 0, ["default"]) == 1
    # Then the job is back in its queue (it runs again: at-least-once), not stranded
    assert r.lrange("queue:default", 0, -1) == [job(1)] and r.zcard(RESERVED) == 0


def test_requeue_leaves_a_job_that_can_go_nowhere_and_says_so(r, make_fetcher):
    # Given a slot holding jobs of two queues; the key of one and dead both hold strings
    f = make_fetcher(queues=("broken", "default"))
    r.lpush("queue:broken", job(1, "broken"))
    r.lpush("queue:default", job(2), job(3))
    assert len(f.reserve(3)) == 3
    r.set("queue:broken", "x")
    r.set("dead", "oops")
    # When the slot is requeued
    with pytest.raises(recovery.Stuck, match="1 job.* cannot be put back"):
        recovery.requeue_slot(r, K, ME, 0, ["broken", "default"])
    # Then the others are back in their queue, the stuck one is still reserved (a failing
    # write in the middle used to abort the script: some pushed, all still reserved)
    assert r.lrange("queue:default", 0, -1) == [job(3), job(2)]
    assert [m.split(b"\0")[-1] for m in r.zrange(RESERVED, 0, -1)] == [job(1, "broken")]
    # And a second attempt pushes nothing twice; once dead is fixed the job goes there
    with pytest.raises(recovery.Stuck):
        recovery.requeue_slot(r, K, ME, 0, ["broken", "default"])
    assert r.llen("queue:default") == 2
    r.delete("dead")
    assert recovery.requeue_slot(r, K, ME, 0, ["broken", "default"]) == 0
    assert r.zrange("dead", 0, -1) == [job(1, "broken")] and r.zcard(RESERVED) == 0


def test_requeue_leaves_a_landed_job_that_can_go_nowhere_in_its_landing_list(r, make_fetcher):
    f = make_fetcher(queues=("broken",))
    r.lpush("queue:broken", job(1, "broken"))
    assert f.block() == job(1, "broken")
    r.set("queue:broken", "x")
    r.set("dead", "oops")
    with pytest.raises(recovery.Stuck):
        recovery.requeue_slot(r, K, ME, 0, ["broken"])
    assert r.lrange(K.landing(ME, 0, "broken"), 0, -1) == [job(1, "broken")]


def test_requeue_keeps_and_replaces_the_members_it_is_told_to(r, make_fetcher):
    f = make_fetcher()
    r.lpush("queue:default", job(1), job(2), job(3))
    one, two, three = f.reserve(3)
    moved = recovery.requeue_slot(r, K, ME, 0, ["default"], replace={two.member: b"TWO"},
                                  keep=[three.member])
    assert moved == 2
    assert r.lrange("queue:default", 0, -1) == [b"TWO", job(1)]
    assert r.zrange(RESERVED, 0, -1) == [three.member]


def test_a_master_whose_jobs_can_go_nowhere_stays_registered_until_they_can(r, make_fetcher):
    # Given a dead master (no lease) whose slot holds a job of a broken queue, dead broken too
    recovery.register(r, K, ME, 1, ["broken"], 60_000)
    f = make_fetcher(queues=("broken",))
    r.lpush("queue:broken", job(1, "broken"))
    f.reserve(1)
    r.delete(K.lease(ME))
    r.set("queue:broken", "x")
    r.set("dead", "oops")
    # When another master reaps it
    assert recovery.reap_expired(r, K) == [(ME, 0)]
    # Then the registration stays (so the reap is tried again) and the job with it
    assert r.hexists(K.masters, ME) and r.zcard(RESERVED) == 1
    # And once dead is fixed, the next reap finishes the job
    r.delete("dead")
    assert recovery.reap_expired(r, K) == [(ME, 0)]
    assert not r.hexists(K.masters, ME) and r.zcard("dead") == 1 and r.zcard(RESERVED) == 0


def test_reserve_refuses_a_clobbered_slot_key_before_acking_anything(r, make_fetcher):
    import redis as redis_lib
    f = make_fetcher()
    r.lpush("queue:default", job(1), job(2))
    (one,) = f.reserve(1)
    f.ack(one)
    r.set(K.landing(ME, 0, "default"), "x")
    with pytest.raises(redis_lib.ResponseError, match="WRONGTYPE"):
        f.reserve(1)
    # nothing was written: the ack is still pending, the next job still queued
    assert r.zrange(RESERVED, 0, -1) == [one.member] and r.llen("queue:default") == 1


# --- the master's failure path -------------------------------------------------------------------

def test_a_timeout_kill_whose_retry_key_is_broken_is_held_not_requeued(r, make_fetcher):
    # Given a slot running a job the master killed at its timeout, with `retry` a string
    from queued import config
    cfg = config.from_dict({"queues": ["default"]})
    f = make_fetcher()
    r.lpush("queue:default", job(1), job(2))
    running, other = f.reserve(2)
    r.set("retry", "oops")
    jid = json.loads(running.payload)["jid"]
    # When the master settles the slot
    moved, failed, held = recovery.settle(r, K, ME, cfg, 0, code=-9, reason="timeout",
                                          running_jid=jid, timeout=1.0)
    # Then the other job is back in its queue, the killed one stays reserved and is held
    assert (moved, failed) == (1, 1)
    (held,) = held
    assert held.member == running.member and held.kind == "retry"
    assert r.lrange("queue:default", 0, -1) == [other.payload]
    assert r.zrange(RESERVED, 0, -1, withscores=True) == [(running.member, -1.0)]
    # And when the key is fixed, the held failure is written, once
    assert recovery.write_held(r, K, ME, cfg, held) is False
    r.delete("retry")
    assert recovery.write_held(r, K, ME, cfg, held) is True
    assert [json.loads(m)["jid"] for m in r.zrange("retry", 0, -1)] == [jid]
    assert r.zcard(RESERVED) == 0


# --- a master whose registration is gone -------------------------------------------------------

def test_a_worker_of_an_unregistered_master_takes_nothing_and_puts_back_what_it_holds(
        r, make_fetcher):
    # Given a slot holding a landed job and a reservation whose reply was lost, and then its
    # master reaped (lease expired while frozen: registration gone)
    f = make_fetcher()
    r.lpush("queue:default", job(1))
    assert f.block() == job(1)
    r.zadd(RESERVED, {b"default\0lost\0" + job(2): 1})
    r.lpush("queue:default", job(3))
    r.hdel(K.masters, ME)
    # When the worker reserves
    got = f.reserve(5)
    # Then it takes nothing and says it is unregistered; the landed and the lost jobs are
    # back at the head of their queue, so no job sits in a slot no master would recover
    assert got == [] and f.registered is False and f.checked_all is False
    assert r.zcard(RESERVED) == 0 and r.llen(K.landing(ME, 0, "default")) == 0
    assert [r.rpop("queue:default") for _ in range(3)] == [job(1), job(2), job(3)]
    # And once the master registers again, it takes jobs as before
    r.hset(K.masters, ME, "{}")
    r.lpush("queue:default", job(4))
    assert [g.payload for g in f.reserve(5)] == [job(4)] and f.registered is True
