"""queued.server.scheduler: due jobs move from schedule/retry to their queues, each exactly once,
with ``enqueued_at`` set and every other byte of the payload as the producer wrote it.

The scheduler's steps (poll, tick, elect, resign) are called directly; ``tick`` gets its clock
from the test.
"""
from __future__ import annotations

import json
import logging
import threading
import time

import pytest
import redis as redis_lib

from queued import config
from queued.keys import Keys
from queued.server.scheduler import BATCH, Scheduler

from harness import wait_for

K = Keys()


def cfg(**over):
    base = {"scheduler_poll_interval": 0.5, "poll_interval_average": 10,
            "heartbeat_interval": 5}
    base.update(over)
    return config.from_dict(base)


@pytest.fixture
def sched(r):
    return Scheduler(r, K, "host:1:aaa", cfg())


def member(i, queue="default", **extra) -> bytes:
    msg = {"retry": True, "queue": queue, "class": "X", "args": [i], "jid": f"{i:024x}",
           "created_at": 1795235935.0895905}
    msg.update(extra)
    return json.dumps(msg, separators=(",", ":")).encode()


def without_enqueued_at(raw: bytes) -> bytes:
    """The payload bytes with the ``,"enqueued_at":<number>`` the scheduler appended cut out."""
    i = raw.index(b',"enqueued_at":')
    j = i + len(b',"enqueued_at":')
    while j < len(raw) and raw[j:j + 1] in b"0123456789.eE+-":
        j += 1
    return raw[:i] + raw[j:]


def past(seconds=10.0) -> float:
    return time.time() - seconds


# --- poll -------------------------------------------------------------------------------------

def test_poll_moves_due_jobs_from_schedule_and_retry_to_their_queues(r, sched):
    # Given one due job in schedule, one in retry (another queue), one not yet due
    r.zadd("schedule", {member(1): past()})
    r.zadd("retry", {member(2, "low"): past()})
    r.zadd("schedule", {member(3): time.time() + 3600})
    before = time.time()
    # When the scheduler polls
    sched.poll()
    # Then the due ones are in queue:<q>, with enqueued_at, and SADDed to queues
    (moved1,) = r.lrange("queue:default", 0, -1)
    (moved2,) = r.lrange("queue:low", 0, -1)
    for raw, orig in ((moved1, member(1)), (moved2, member(2, "low"))):
        msg = json.loads(raw)
        assert before - 1 <= msg["enqueued_at"] <= time.time() + 1
        assert isinstance(msg["enqueued_at"], float)
        assert without_enqueued_at(raw) == orig
    assert r.smembers("queues") == {b"default", b"low"}
    # And the future job waits
    assert r.zrange("schedule", 0, -1) == [member(3)]
    assert r.zcard("retry") == 0


def test_poll_keeps_every_other_byte(r, sched):
    # Key order, a big integer, 1.0 vs 1, raw unicode, '/', unknown keys, nested objects
    raw = ('{"queue":"default","zzz":1,"class":"Billing::Job","args":[18446744073709551616,'
           '1.0,1,"\u00e9\u6f22\U0001f600","a/b",{"nested":[true,null,-0.5]}],'
           '"jid":"0123456789abcdef01234567","custom":{"b":2,"a":1},"created_at":'
           '1795235935.0895905,"retry":5}').encode()
    r.zadd("schedule", {raw: past()})
    sched.poll()
    (moved,) = r.lrange("queue:default", 0, -1)
    assert without_enqueued_at(moved) == raw
    assert moved.endswith(b'"retry":5,"enqueued_at":' + moved.rsplit(b":", 1)[1])


def test_poll_replaces_an_existing_enqueued_at_in_place(r, sched):
    raw = member(1, enqueued_at=1.5)
    r.zadd("retry", {raw: past()})
    sched.poll()
    (moved,) = r.lrange("queue:default", 0, -1)
    msg = json.loads(moved)
    assert msg["enqueued_at"] > 1.5
    assert list(msg) == list(json.loads(raw))  # same key order


def test_poll_removes_at(r, sched):
    r.zadd("schedule", {member(1, at=123.0): past()})
    sched.poll()
    (moved,) = r.lrange("queue:default", 0, -1)
    assert "at" not in json.loads(moved)
    assert without_enqueued_at(moved) == member(1)


def test_poll_keeps_payloads_in_their_original_form(r, sched):
    # A PHP producer's json_encode escapes '/' and non-ASCII; another writes spaces. The
    # module promises "sets enqueued_at without re-encoding anything else".
    raw = (b'{"queue": "default", "class": "X", "args": ["a\\/b", "caf\\u00e9", 1.5e+20],'
           b' "jid": "0123456789abcdef01234567"}')
    r.zadd("schedule", {raw: past()})
    sched.poll()
    (moved,) = r.lrange("queue:default", 0, -1)
    assert json.loads(moved)["args"] == json.loads(raw)["args"]
    assert moved.startswith(raw[:-1])


def test_poll_returns_seconds_until_the_next_due_job(r, sched):
    assert sched.poll() == (None, False)
    r.zadd("schedule", {member(1): time.time() + 30})
    r.zadd("retry", {member(2): time.time() + 10})
    assert sched.poll()[0] == pytest.approx(10, abs=1)
    r.zadd("schedule", {member(3): time.time() + 2})
    assert sched.poll()[0] == pytest.approx(2, abs=1)


def test_poll_moves_more_than_one_batch(r, sched):
    n = BATCH * 2 + 7
    r.zadd("schedule", {member(i): past() - i for i in range(n)})
    r.zadd("retry", {member(i + 10_000): past() for i in range(BATCH + 1)})
    sched.poll()
    assert r.llen("queue:default") == n + BATCH + 1
    assert r.zcard("schedule") == 0 and r.zcard("retry") == 0


def test_due_jobs_are_queued_in_score_order(r, sched):
    r.zadd("schedule", {member(1): past(30), member(2): past(20), member(3): past(10)})
    sched.poll()
    order = [json.loads(r.rpop("queue:default"))["args"][0] for _ in range(3)]
    assert order == [1, 2, 3]


def test_a_member_that_is_not_json_goes_to_dead_verbatim(r, sched, caplog):
    bad = b'{"class":"X","args":[1],"jid":"j", oops'
    r.zadd("schedule", {bad: past(), member(1): past()})
    with caplog.at_level(logging.ERROR, logger="queued.scheduler"):
        sched.poll()
    assert r.zrange("dead", 0, -1) == [bad]
    assert abs(r.zscore("dead", bad) - time.time()) < 5
    assert r.llen("queue:default") == 1  # the good one still moved
    assert r.zcard("schedule") == 0
    assert any(rec.levelno == logging.ERROR for rec in caplog.records)


@pytest.mark.parametrize("bad", [b'[1,2]', b'\xff\xfe', b'{"class":"X","queue":7}'])
def test_other_unusable_members_go_to_dead(r, sched, bad):
    r.zadd("retry", {bad: past()})
    sched.poll()
    assert r.zrange("dead", 0, -1) == [bad]
    assert r.zcard("retry") == 0


@pytest.mark.parametrize("zset,extra", [("schedule", b""),
                                        ("retry", b',"enqueued_at":1795235935.1'),
                                        ("schedule", b',"at":1795235935.1')])
@pytest.mark.parametrize("number", [b"1e400", b"NaN"])
def test_a_member_whose_numbers_cannot_be_written_back_does_not_stop_the_scheduler(
        r, sched, number, zset, extra):
    # Given a due member with a number Python reads as inf/nan (JSON cannot write those back),
    # as a retry (which always carries enqueued_at) or a plain scheduled job, next to an
    # ordinary due job
    bad = (b'{"class":"X","args":[' + number + b'],"jid":"0123456789abcdef01234567"'
           + extra + b'}')
    r.zadd(zset, {bad: past(), member(1): past()})
    # When the scheduler polls, it must not raise (an exception here ends the master loop,
    # and the member is still due when the master comes back)
    sched.poll()
    # Then the ordinary job is queued and the odd one is not lost (queued or dead)
    assert member(1) in [without_enqueued_at(x) for x in r.lrange("queue:default", 0, -1)]
    assert r.zcard(zset) == 0
    assert r.llen("queue:default") + r.zcard("dead") == 2


def test_two_schedulers_polling_at_once_move_each_job_exactly_once(r, redis_url):
    # Given many due jobs
    n = 600
    r.zadd("schedule", {member(i): past() for i in range(n)})
    r.zadd("retry", {member(n + i): past() for i in range(n)})
    barrier = threading.Barrier(2)
    errors = []

    def run(name):
        client = redis_lib.Redis.from_url(redis_url)
        s = Scheduler(client, K, name, cfg())
        barrier.wait()
        try:
            for _ in range(5):
                s.poll()
        except Exception as e:  # noqa: BLE001
            errors.append(e)
        client.close()

    # When two schedulers poll concurrently
    threads = [threading.Thread(target=run, args=(f"m{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    # Then each job is in the queue exactly once
    assert errors == []
    jids = [json.loads(x)["jid"] for x in r.lrange("queue:default", 0, -1)]
    assert len(jids) == 2 * n
    assert len(set(jids)) == 2 * n


# --- leadership -------------------------------------------------------------------------------

def test_only_one_of_two_is_leader_and_resign_hands_over(r):
    a = Scheduler(r, K, "a:1:x", cfg())
    b = Scheduler(r, K, "b:1:x", cfg())
    a.elect()
    b.elect()
    assert (a.leader, b.leader) == (True, False)
    a.elect()
    b.elect()
    assert (a.leader, b.leader) == (True, False)
    ttl = r.pttl(K.scheduler_leader)
    assert 0 < ttl <= 15_000  # 3 heartbeats
    a.resign()
    assert a.leader is False
    assert r.pttl(K.scheduler_leader) <= 1  # resigning leaves the key 1 ms to live
    wait_for(lambda: not r.exists(K.scheduler_leader), what="the resigned key to expire")
    b.elect()
    assert b.leader is True
    a.elect()
    assert a.leader is False
    assert r.get(K.scheduler_leader) == b"b:1:x"


def test_a_leader_whose_key_expired_loses_to_the_new_one(r):
    a = Scheduler(r, K, "a:1:x", cfg())
    b = Scheduler(r, K, "b:1:x", cfg())
    a.elect()
    r.delete(K.scheduler_leader)  # a's key expired (a stalled for 3 beats)
    b.elect()
    a.elect()
    assert (a.leader, b.leader) == (False, True)


def test_resign_by_a_former_leader_does_not_touch_the_new_one(r):
    a = Scheduler(r, K, "a:1:x", cfg())
    b = Scheduler(r, K, "b:1:x", cfg())
    a.elect()
    r.delete(K.scheduler_leader)
    b.elect()
    a.resign()  # a still believes it leads
    # b's key is untouched: its holder and its whole TTL (a resign would leave it 1 ms)
    assert r.get(K.scheduler_leader) == b"b:1:x"
    assert r.pttl(K.scheduler_leader) > 1000


# --- tick -------------------------------------------------------------------------------------

def test_tick_honours_next_poll(r, sched):
    sched.leader = True
    r.zadd("schedule", {member(1): past()})
    sched.next_poll = 100.0
    # Before next_poll: nothing happens
    sched.tick(99.9)
    assert r.llen("queue:default") == 0
    assert sched.due_in(99.9) == pytest.approx(0.1)
    # At next_poll: it polls and plans the next poll within the leader's interval
    sched.tick(100.0)
    assert r.llen("queue:default") == 1
    assert sched.next_poll == pytest.approx(100.5)


def test_tick_as_leader_wakes_for_the_next_due_job(r, sched):
    sched.leader = True
    r.zadd("schedule", {member(1): time.time() + 0.2})
    sched.tick(50.0)
    assert 50.0 < sched.next_poll <= 50.3
    assert r.llen("queue:default") == 0


def test_tick_as_follower_polls_around_the_average(r, sched):
    sched.leader = False
    r.zadd("schedule", {member(1): time.time() + 0.2})
    plans = []
    for _ in range(50):
        sched.next_poll = 0.0
        sched.tick(1000.0)
        plans.append(sched.next_poll - 1000.0)
    assert all(5.0 <= p <= 15.0 for p in plans)  # poll_interval_average 10, jittered 0.5-1.5
    assert len(set(plans)) > 1


@pytest.mark.parametrize("zset", ["schedule", "retry"])
def test_a_due_job_that_names_no_queue_goes_to_dead_not_to_default(r, sched, zset, caplog):
    # Given due jobs whose "queue" is "" or null (Sidekiq 6.4's client refuses them: "Job must
    # include a valid queue name"; its poller pops them, fails and loses them), one without a
    # "queue" (Sidekiq's client fills in "default") and an ordinary one
    empty, null, absent = member(1, ""), member(2, None), member(3)
    absent = json.dumps({k: v for k, v in json.loads(absent).items() if k != "queue"},
                        separators=(",", ":")).encode()
    r.zadd(zset, {empty: past(), null: past(), absent: past(), member(4, "low"): past()})
    # When the scheduler polls
    with caplog.at_level(logging.ERROR, logger="queued.scheduler"):
        sched.poll()
    # Then the two that name no queue are in dead as they were, never pushed to default
    assert sorted(r.zrange("dead", 0, -1)) == sorted([empty, null])
    assert [without_enqueued_at(x) for x in r.lrange("queue:default", 0, -1)] == [absent]
    assert [without_enqueued_at(x) for x in r.lrange("queue:low", 0, -1)] == [member(4, "low")]
    assert r.zcard(zset) == 0 and r.smembers("queues") == {b"default", b"low"}
    # and each is logged with the reason
    assert 'a job must name its queue: its "queue" is ""' in caplog.text
    assert 'a job must name its queue: its "queue" is null' in caplog.text


def test_a_due_job_whose_queue_key_is_not_a_list_goes_to_dead_and_the_rest_move(
        r, sched, caplog):
    # Given due jobs for "default" and for "broken", whose key was overwritten with a string
    # (LPUSH fails with WRONGTYPE: before, that aborted the move on every poll, for ever)
    r.set("queue:broken", "x")
    r.zadd("schedule", {member(1): past(), member(2, "broken"): past(5)})
    # When the scheduler polls
    with caplog.at_level(logging.ERROR, logger="queued.scheduler"):
        assert sched.poll() == (None, False)
    # Then the default job is queued, the other is in dead (with its enqueued_at), the
    # schedule is empty, and the log names the queue
    assert [without_enqueued_at(x) for x in r.lrange("queue:default", 0, -1)] == [member(1)]
    assert [without_enqueued_at(x) for x in r.zrange("dead", 0, -1)] == [member(2, "broken")]
    assert abs(r.zscore("dead", r.zrange("dead", 0, 0)[0]) - time.time()) < 5
    assert r.zcard("schedule") == 0 and r.get("queue:broken") == b"x"
    assert r.smembers("queues") == {b"default"}
    assert [x.getMessage() for x in caplog.records] == [
        "a due job from schedule could not be pushed to queue broken: its key queue:broken "
        "holds another Redis type, not a list (WRONGTYPE); sent to dead"]


# --- keys of the wrong type, a backlog, client middleware ---------------------------------------

def test_a_retry_key_of_another_type_does_not_stop_schedule_from_being_served(r, sched, caplog):
    # Given `retry` overwritten with a string and a due job in `schedule`
    r.set("retry", "oops")
    r.zadd("schedule", {member(1): past()})
    # When the scheduler polls, twice
    with caplog.at_level(logging.ERROR, logger="queued.scheduler"):
        assert sched.poll() == (None, False)
        sched.poll()
    # Then the scheduled job is queued (due.lua used to abort on the first key), retry is
    # untouched, and the bad key is named once
    assert [without_enqueued_at(x) for x in r.lrange("queue:default", 0, -1)] == [member(1)]
    assert r.get("retry") == b"oops"
    assert [x.getMessage() for x in caplog.records] == [
        "key retry holds another Redis type, not a sorted set (WRONGTYPE); its due jobs wait "
        "until it is fixed; serving the others"]


def test_unmovable_due_jobs_stay_scheduled_and_are_passed_over(r, sched, caplog):
    # Given more unusable due jobs than one batch while `dead` holds a string (they could go
    # nowhere), and good due jobs after them
    r.set("dead", "oops")
    bad = {b"not json %d" % i: past(100 - i * 0.01) for i in range(BATCH + 20)}
    r.zadd("schedule", bad)
    r.zadd("schedule", {member(i): past(1) for i in range(3)})
    # When the scheduler polls
    with caplog.at_level(logging.ERROR, logger="queued.scheduler"):
        sched.poll()
    # Then the good ones are queued, the bad ones are still scheduled (not lost: the ZREM
    # used to come before a ZADD that failed), and the log says so
    assert sorted(without_enqueued_at(x) for x in r.lrange("queue:default", 0, -1)) == sorted(
        member(i) for i in range(3))
    assert set(r.zrange("schedule", 0, -1)) == set(bad)
    assert r.get("dead") == b"oops"
    assert any("due job(s) in schedule can go neither to their queue nor to dead" in
               x.getMessage() for x in caplog.records)
    # And once dead is fixed, the next poll sends them there
    r.delete("dead")
    sched.poll()
    assert r.zcard("schedule") == 0 and set(r.zrange("dead", 0, -1)) == set(bad)


def test_a_job_whose_queue_and_dead_are_both_broken_stays_scheduled(r, sched):
    r.set("queue:broken", "x")
    r.set("dead", "oops")
    r.zadd("schedule", {member(1, "broken"): past()})
    sched.poll()
    assert r.zrange("schedule", 0, -1) == [member(1, "broken")]
    r.delete("dead")
    sched.poll()
    assert r.zcard("schedule") == 0 and r.zcard("dead") == 1


def test_a_backlog_is_moved_in_slices_so_the_master_loop_keeps_turning(r, sched):
    # Given 250 due jobs
    r.zadd("schedule", {member(i): past() for i in range(250)})
    # When the scheduler polls with a slice of 100
    assert sched.poll(limit=100) == (None, True)
    # Then it stopped after the slice (a batch or so), telling the caller there is more
    assert 100 <= r.llen("queue:default") <= 100 + BATCH
    assert sched.poll(limit=100)[1] is True
    assert sched.poll(limit=100) == (None, False)
    assert r.llen("queue:default") == 250 and r.zcard("schedule") == 0


def test_tick_comes_back_at_once_while_a_backlog_is_left(r, sched, monkeypatch):
    monkeypatch.setattr("queued.server.scheduler.SLICE", 100)
    r.zadd("schedule", {member(i): past() for i in range(250)})
    sched.tick(1000.0)
    assert sched.next_poll == 1000.0 and r.llen("queue:default") < 250
    sched.tick(1000.0)
    sched.tick(1000.0)
    assert r.llen("queue:default") == 250
    assert sched.next_poll > 1000.0


@pytest.fixture
def middleware():
    from queued.middleware import client_middleware
    yield client_middleware
    client_middleware.clear()


class Tagger:
    def __call__(self, job, msg, queue, call_next):
        msg["tagged_by"] = job
        return call_next()


class Canceller:
    def __call__(self, job, msg, queue, call_next):
        if msg["args"] != [2]:
            return call_next()


class Breaker:
    def __call__(self, job, msg, queue, call_next):
        raise RuntimeError("broken middleware")


def test_due_jobs_go_through_client_middleware_as_sidekiq_pushes_them(r, sched, middleware):
    # Given client middleware (Sidekiq 6.4's poller pushes due jobs through Client.push,
    # so its client middleware sees them) that tags jobs and cancels job 2
    middleware.add(Tagger)
    middleware.add(Canceller)
    r.zadd("schedule", {member(1): past(), member(2): past(), member(3, at=5.0): past()})
    # When the scheduler polls
    sched.poll()
    # Then the jobs that went through are tagged, with enqueued_at and without at; the
    # cancelled one is dropped (as Sidekiq drops a due job whose push a middleware cancels)
    moved = sorted((json.loads(x) for x in r.lrange("queue:default", 0, -1)),
                   key=lambda m: m["args"])
    assert [(m["args"], m["tagged_by"], "at" in m) for m in moved] == [([1], "X", False),
                                                                     ([3], "X", False)]
    assert all(isinstance(m["enqueued_at"], float) for m in moved)
    assert r.zcard("schedule") == 0 and r.zcard("dead") == 0


def test_a_raising_client_middleware_leaves_due_jobs_moving(r, sched, middleware, caplog):
    middleware.add(Breaker)
    r.zadd("schedule", {member(1): past()})
    with caplog.at_level(logging.ERROR, logger="queued.scheduler"):
        sched.poll()
    assert [without_enqueued_at(x) for x in r.lrange("queue:default", 0, -1)] == [member(1)]
    assert "client middleware raised on a due job" in caplog.text
