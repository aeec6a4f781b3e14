"""Unique jobs against a real Redis, in this process: the push (its lock taken in the same step),
bulk pushes, tasks, what the operator's removals release, listing and releasing locks by hand,
and queued.testing's modes (no Redis: no uniqueness)."""
import json
import time

import pytest

import queued
import queued.testing
from queued import api, unique
from queued.keys import Keys

K = Keys()


class UniqueReport(queued.Job):
    queued_options = {"unique_for": 60}

    def perform(self, account):
        pass


class NotUnique(queued.Job):
    def perform(self, account):
        pass


def holder(r, klass, args, queue="default"):
    got = r.get(K.unique(unique.digest({"class": klass, "queue": queue, "args": args})))
    return got.decode() if got else None


def test_a_duplicate_push_returns_none_and_is_counted(producer, r):
    first = UniqueReport.perform_async(7)
    assert first is not None
    assert UniqueReport.perform_async(7) is None
    assert UniqueReport.perform_async(8) is not None  # other args: another job
    assert UniqueReport.set(queue="low").perform_async(7) is not None  # another queue too
    assert r.llen("queue:default") == 2 and r.llen("queue:low") == 1
    assert holder(r, "UniqueReport", [7]) == first
    assert r.get(K.counter("unique_dropped")) == b"1"
    # The payload carries its period and its digest (so a retry to another queue finds it)
    msg = json.loads(r.lindex("queue:default", -1))
    assert msg["unique_for"] == 60
    assert msg["unique_digest"] == unique.digest({"class": "UniqueReport", "queue": "default",
                                                  "args": [7]})
    # The lock lives for the period
    assert 59_000 < r.pttl(K.unique(msg["unique_digest"])) <= 60_000


def test_a_scheduled_unique_jobs_lock_lasts_its_delay_plus_its_period(producer, r):
    jid = UniqueReport.perform_in(100, 1)
    assert UniqueReport.perform_in(5, 1) is None
    ((member, _at),) = r.zrange("schedule", 0, -1, withscores=True)
    assert json.loads(member)["jid"] == jid
    assert 159_000 < r.pttl(K.unique(json.loads(member)["unique_digest"])) <= 160_000


def test_set_unique_for_makes_one_push_unique_and_none_means_not(producer, r):
    assert NotUnique.set(unique_for=10).perform_async(1) is not None
    assert NotUnique.set(unique_for=10).perform_async(1) is None
    assert NotUnique.perform_async(1) is not None  # the class itself is not unique
    assert NotUnique.set(unique_for=None).perform_async(1) is not None
    with pytest.raises(TypeError, match="unique_for"):
        NotUnique.set(unique_for=0)
    with pytest.raises(TypeError, match="unique_until"):
        NotUnique.set(unique_until="done")
    with pytest.raises(ValueError, match="unique_for"):
        producer.push({"class": "Ruby::Job", "args": [], "unique_for": "1h"})


@pytest.mark.parametrize("huge", [1e20, 1e308, float("inf"), 10**400, 315360001])
def test_a_unique_for_past_ten_years_is_refused_at_the_call(producer, r, huge):
    # (it passed the option check, then failed cryptically at the push: rt3 #2)
    with pytest.raises(ValueError, match=r"unique_for.*at most 315360000 seconds"):
        NotUnique.set(unique_for=huge)
    with pytest.raises(ValueError, match=r"unique_for.*at most 315360000 seconds"):
        producer.push({"class": "Ruby::Job", "args": [], "unique_for": huge})
    with pytest.raises(ValueError, match=r"unique_for.*at most 315360000 seconds"):
        type("TooLong", (queued.Job,), {"queued_options": {"unique_for": huge},
                                        "perform": lambda self: None})
    assert r.keys("*") == []
    # ten years exactly is allowed, and so is a job scheduled far away (its lock is capped)
    assert NotUnique.set(unique_for=315360000).perform_async(1) is not None
    assert NotUnique.set(unique_for=60).perform_at(1e300, 2) is not None
    assert r.zcard("schedule") == 1 and len(r.keys("queued:unique:*")) == 2
    # capped at twice ten years (unique.lock_of), not its delay of ~1e300 seconds
    ttl = r.pttl(K.unique(unique.digest({"class": "NotUnique", "queue": "default", "args": [2]})))
    assert 2 * 315360000 * 1000 - 60_000 < ttl <= 2 * 315360000 * 1000


def test_a_foreign_payloads_huge_unique_for_reads_as_ten_years():
    for huge in (1e20, 1e308, 10**400, 315360001):
        assert unique.period({"unique_for": huge}) == 315360000.0
        lock = unique.lock_of(K, {"class": "X", "args": [], "jid": "j", "unique_for": huge})
        assert lock.ttl_ms == 315360000 * 1000
    assert unique.period({"unique_for": 5}) == 5.0
    for odd in (0, -1, "60", True, None, float("nan")):
        assert unique.period({"unique_for": odd}) is None


def test_perform_bulk_of_a_unique_job_says_which_were_dropped(producer, r):
    existing = UniqueReport.perform_async(2)
    result = UniqueReport.perform_bulk([[1], [2], [3], [1]])
    # One entry per job, in order: None for the duplicates (of a pending job, or within the
    # batch itself)
    assert len(result) == 4
    assert result[1] is None and result[3] is None
    assert result[0] is not None and result[2] is not None
    assert r.llen("queue:default") == 3
    assert holder(r, "UniqueReport", [2]) == existing
    assert r.get(K.counter("unique_dropped")) == b"2"
    # A bulk push of a job that is not unique keeps its shape: the pushed jids
    assert len(NotUnique.perform_bulk([[1], [1]])) == 2


def test_a_task_does_not_count_a_dropped_duplicate(producer, r):
    UniqueReport.perform_async(1)  # pending already, outside the task
    with queued.Task("reports") as task:
        UniqueReport.perform_async(1)  # a duplicate: dropped
        UniqueReport.perform_async(2)
        UniqueReport.perform_async(2)  # a duplicate within the block
        NotUnique.perform_async(9)
    progress = task.progress()
    assert (progress["total"], progress["enqueued"]) == (2, 2)
    assert {rec["class"] for rec in task.jobs()} == {"UniqueReport", "NotUnique"}
    assert r.llen("queue:default") == 3
    assert r.get(K.counter("unique_dropped")) == b"2"


def test_an_operators_delete_or_kill_gives_the_lock_up(producer, r):
    admin = api.Admin(r)
    scheduled = UniqueReport.perform_in(300, "s")
    queued_jid = UniqueReport.perform_async("q")
    retrying = UniqueReport.perform_in(300, "r")
    # (one of them waits in retry instead)
    entry = admin.scheduled.find(retrying)
    r.zrem("schedule", entry.raw)
    r.zadd("retry", {entry.raw: time.time() + 300})
    # Delete from the schedule, delete from a queue, kill from retry: each lock goes
    assert admin.scheduled.delete(admin.scheduled.find(scheduled))
    assert admin.queue("default").delete(admin.queue("default").find(queued_jid))
    assert admin.retries.kill(admin.retries.find(retrying))
    assert holder(r, "UniqueReport", ["s"]) is None
    assert holder(r, "UniqueReport", ["q"]) is None
    assert holder(r, "UniqueReport", ["r"]) is None
    assert UniqueReport.perform_async("s") is not None and UniqueReport.perform_async("q") is not None


def test_a_payload_without_a_queue_key_is_locked_by_the_queue_it_is_in(producer, r):
    # (as its twin pushed by queued's client is: with null, two locks, both ran at once)
    twin = {"class": "UniqueReport", "queue": "low", "args": [1]}
    assert unique.digest({"class": "UniqueReport", "args": [1]}, "low") == unique.digest(twin)
    assert unique.digest({"class": "UniqueReport", "args": [1]}) == unique.digest(
        {**twin, "queue": "default"})  # (outside a queue: Sidekiq's default)
    assert unique.digest({"class": "UniqueReport", "queue": "low", "args": [1]}, "x") == \
        unique.digest(twin)  # (its own queue key wins)
    # An operator's delete of such a job from queue:low gives up the lock its run took there
    # (held as "<jid>:<nonce>" by a run from before the job had a jid of its own)
    raw = json.dumps({"class": "UniqueReport", "args": [1], "unique_for": 60, "jid": "j" * 24})
    r.lpush("queue:low", raw)
    r.set(K.unique(unique.digest(twin)), "j" * 24 + ":0a1b")
    admin = api.Admin(r)
    assert admin.queue("low").delete(admin.queue("low").find("j" * 24))
    assert holder(r, "UniqueReport", [1], "low") is None
    # But never a lock another jid holds, nor one of another jid that merely starts alike
    r.lpush("queue:low", raw)
    r.set(K.unique(unique.digest(twin)), "j" * 24 + "x:0a1b")
    assert admin.queue("low").delete(admin.queue("low").find("j" * 24))
    assert holder(r, "UniqueReport", [1], "low") == "j" * 24 + "x:0a1b"


def test_a_retry_by_hand_keeps_the_lock(producer, r):
    admin = api.Admin(r)
    jid = UniqueReport.perform_in(300, "kept")
    assert admin.scheduled.retry(admin.scheduled.find(jid))
    assert holder(r, "UniqueReport", ["kept"]) == jid  # still pending: still its lock
    assert UniqueReport.perform_async("kept") is None


def test_a_removal_that_finds_the_job_gone_leaves_its_lock(producer, r):
    admin = api.Admin(r)
    jid = UniqueReport.perform_in(300, "moved")
    entry = admin.scheduled.find(jid)
    # The scheduler moved it to its queue meanwhile: the delete finds nothing, and the lock
    # of the job, pending in its queue, stays
    r.zrem("schedule", entry.raw)
    r.lpush("queue:default", entry.raw)
    assert admin.scheduled.delete(entry) is False
    assert holder(r, "UniqueReport", ["moved"]) == jid


def test_clearing_a_queue_or_the_schedule_gives_their_jobs_locks_up(producer, r):
    admin = api.Admin(r)
    for i in range(1500):
        NotUnique.perform_async(i)
    UniqueReport.perform_async("c1")
    UniqueReport.perform_async("c2")
    UniqueReport.perform_in(60, "c3")
    assert admin.queue("default").clear() == 1502
    assert holder(r, "UniqueReport", ["c1"]) is None and holder(r, "UniqueReport", ["c2"]) is None
    assert holder(r, "UniqueReport", ["c3"]) is not None  # scheduled: not in that queue
    assert admin.scheduled.delete_all() == 1
    assert holder(r, "UniqueReport", ["c3"]) is None
    assert r.keys("queued:snapshot:*") == [] and not r.sismember("queues", "default")


def test_locks_are_listed_and_given_up_by_hand(producer, r):
    admin = api.Admin(r)
    a = UniqueReport.perform_async("a")
    b = UniqueReport.perform_async("b")
    found = {lock.jid: lock for lock in admin.locks.scan()}
    assert set(found) == {a, b}
    assert all(59 < lock.ttl <= 60 for lock in found.values())
    assert admin.locks.get(found[a].digest).jid == a
    assert admin.locks.release(found[a].digest) is True
    assert admin.locks.release(found[a].digest) is False
    assert UniqueReport.perform_async("a") is not None  # its next push goes in
    assert admin.locks.release_all() == 2
    assert admin.locks.scan() == []


def test_the_testing_modes_take_every_push(r):
    with queued.testing.fake():
        UniqueReport.clear()
        assert UniqueReport.perform_async(1) is not None
        assert UniqueReport.perform_async(1) is not None
        assert len(UniqueReport.jobs) == 2
        UniqueReport.clear()
    assert r.keys("*") == []
