"""queued.server.fetch: reserve, block, ack and fail against a real Redis, one Fetcher in-process.

No daemon: each test drives a Fetcher's steps directly and looks at the keys it leaves behind.
"""
from __future__ import annotations

import collections
import logging
import random
import threading
import time

import pytest
import redis as redis_lib

from queued.server.fetch import Fetcher
from queued.server.reserved import GONE, WRITTEN, Reservation, fetch_orders, split_member
from queued.keys import Keys

from conftest import FETCH_IDENTITY, job
from harness import wait_for

IDENTITY = FETCH_IDENTITY
K = Keys()
RESERVED = K.reserved(IDENTITY, 0)


@pytest.fixture
def fetcher(make_fetcher):
    return make_fetcher()


def reserved(r):
    return r.zrange(RESERVED, 0, -1, withscores=True)


# --- reserve ----------------------------------------------------------------------------------

def test_reserve_takes_the_right_end_into_the_reserved_zset(r, fetcher):
    # Given three jobs LPUSHed in order (as producers do)
    r.lpush("queue:default", job(1), job(2), job(3))
    # When one job is reserved
    got = fetcher.reserve(1)
    # Then it is the first pushed (FIFO), and it sits in the reserved zset, not in the queue
    assert [g.payload for g in got] == [job(1)]
    assert got[0].queue == "default"
    assert r.lrange("queue:default", 0, -1) == [job(3), job(2)]
    members = reserved(r)
    assert [m for m, _ in members] == [got[0].member]
    queue, token_payload = got[0].member.split(b"\0", 1)
    token, payload = token_payload.split(b"\0", 1)
    assert queue == b"default" and payload == job(1) and token
    assert split_member(got[0].member) == ("default", job(1))


def test_reserve_n_takes_up_to_n_with_increasing_scores(r, fetcher):
    r.lpush("queue:default", *(job(i) for i in range(5)))
    got = fetcher.reserve(3)
    assert [g.payload for g in got] == [job(0), job(1), job(2)]
    members = reserved(r)
    # Scores strictly increase in reservation order, so ZRANGE 0 0 is the job run first.
    assert [m for m, _ in members] == [g.member for g in got]
    scores = [s for _, s in members]
    assert scores == sorted(scores) and len(set(scores)) == 3
    assert r.zrange(RESERVED, 0, 0) == [got[0].member]
    # Scores are Redis's clock (epoch seconds), not a counter.
    server_now = r.time()[0]
    assert abs(scores[0] - server_now) < 5
    # Asking for more than there is returns what there is; then nothing. (The worker acks
    # what it finished before it reserves again: anything else held is handed back.)
    for g in got:
        fetcher.ack(g)
    rest = fetcher.reserve(10)
    assert [g.payload for g in rest] == [job(3), job(4)]
    assert r.zcard(RESERVED) == 2
    for g in rest:
        fetcher.ack(g)
    assert fetcher.reserve(10) == []
    assert r.zcard(RESERVED) == 0


def test_a_batch_is_scored_at_redis_time_plus_one_microsecond_per_job(r, fetcher):
    """reserve.lua writes each score and token with integer formats (issue 18: no float
    sprintf per job): the score is the call's TIME plus the job's place in microseconds, to
    the microsecond, and the token is TIME.place, unique per reservation; 50 jobs take the
    token's table of small places and the formatted ones past it."""
    r.lpush("queue:default", *(job(i) for i in range(50)))
    t0 = r.time()
    got = fetcher.reserve(50)
    t1 = r.time()
    assert [g.payload for g in got] == [job(i) for i in range(50)]
    members = reserved(r)
    assert [m for m, _ in members] == [g.member for g in got]
    tokens = [m.split(b"\0", 2)[1].decode() for m, _ in members]
    sec, usec = (int(x) for x in tokens[0].split(".")[:2])
    assert t0 <= (sec, usec) <= t1
    assert tokens == [f"{sec}.{usec}.{place}" for place in range(6, 56)]
    for place, (_, score) in zip(range(6, 56), members):
        whole, micro = divmod(sec * 1_000_000 + usec + place, 1_000_000)
        assert score == float(f"{whole}.{micro:06d}")
        assert abs(score - (sec + (usec + place) / 1e6)) < 5e-7
    assert [s for _, s in members] == sorted({s for _, s in members})


def test_a_batch_scored_across_a_second_boundary_carries_exactly(r):
    """The same integer formats at a TIME fixed 20 us before a second ends (reserve.lua run
    with its one TIME call replaced by that value): the places past it carry into the next
    second, and every score is the decimal TIME + place us exactly. (At the clock's TIME the
    test above meets a carry once in ~20,000 runs; the float scores of before were off by an
    ulp at 5 of these 50 places, where at the clock's TIME they could all be right.)"""
    import os
    from queued.server import scripts
    with open(os.path.join(os.path.dirname(scripts.__file__), "lua", "reserve.lua")) as f:
        source = f.read()
    call = "local t = redis.call('TIME')"
    assert source.count(call) == 1
    sec, usec = 1795726059, 999980
    fixed = source.replace(call, f"local t = {{'{sec}', '{usec}'}}")
    r.hset(K.masters, IDENTITY, "{}")
    r.lpush("queue:default", *(job(i) for i in range(50)))
    # KEYS: reserved, landing, masters, paused, the queue; ARGV: N, Q, the landing's queue,
    # identity, adopt, no acks, the queue's name, one fetch order for every job
    reply = r.eval(fixed, 5, RESERVED, K.landing(IDENTITY, 0, "default"), K.masters, K.paused,
                   "queue:default", 50, 1, "default", IDENTITY, 1, 0, "default", 1)
    assert reply[:6] == [0, 0, 0, 1, 0, 0] and len(reply) == 56
    members = reserved(r)
    assert [m for m, _ in members] == reply[6:]
    assert [m.split(b"\0", 2)[1].decode() for m, _ in members] == [
        f"{sec}.{usec}.{place}" for place in range(6, 56)]
    assert [s for _, s in members] == [
        float(f"{sec + (usec + place) // 1_000_000}.{(usec + place) % 1_000_000:06d}")
        for place in range(6, 56)]
    assert members[20 - 6][1] == 1795726060.0  # (the first place past the second)


def test_strict_order_drains_the_first_queue_first(r, make_fetcher):
    f = make_fetcher(queues=("high", "low"))
    r.lpush("queue:low", job(1, "low"), job(2, "low"))
    r.lpush("queue:high", job(3, "high"))
    got = f.reserve(3)
    assert [(g.queue, g.payload) for g in got] == [
        ("high", job(3, "high")), ("low", job(1, "low")), ("low", job(2, "low"))]


def test_reservation_records_the_queue_it_came_from_not_the_payload_queue(r, make_fetcher):
    f = make_fetcher(queues=("high", "low"))
    r.lpush("queue:low", job(1, "somewhere-else"))
    (got,) = f.reserve(1)
    assert got.queue == "low"
    assert got.member.startswith(b"low\0")


def test_identical_payloads_stay_two_jobs(r, fetcher, make_fetcher):
    # Given the same bytes pushed three times (a producer may well do that)
    r.lpush("queue:default", job(7), job(7), job(7))
    # When reserved in one call, and in a separate call by another slot
    a = fetcher.reserve(2)
    b = make_fetcher(slot=1).reserve(1)
    # Then nothing collapses: three distinct members, three jobs
    assert len({x.member for x in a + b}) == 3
    assert r.zcard(RESERVED) == 2 and r.zcard(K.reserved(IDENTITY, 1)) == 1
    assert all(x.payload == job(7) for x in a + b)


# --- weighted order ---------------------------------------------------------------------------

def test_fetch_orders_strict_is_one_fixed_order():
    assert fetch_orders(["a", "b", "c"], ["a", "b", "c"], True, 5, random.Random(1)) == [1, 2, 3]
    assert fetch_orders(["a"], ["a", "a"], False, 5, random.Random(1)) == [1]


def test_fetch_orders_weighted_are_permutations_distributed_by_weight():
    names = ["a", "b", "c"]
    weighted = ["a"] * 3 + ["b"] * 2 + ["c"]
    n = 10_000
    out = fetch_orders(names, weighted, False, n, random.Random(12345))
    assert len(out) == 3 * n
    orders = [tuple(out[i:i + 3]) for i in range(0, len(out), 3)]
    assert all(sorted(o) == [1, 2, 3] for o in orders)
    first = collections.Counter(o[0] for o in orders)
    # Sidekiq's shuffle.uniq: P(first = q) = weight(q) / total weight.
    assert first[1] / n == pytest.approx(3 / 6, abs=0.03)
    assert first[2] / n == pytest.approx(2 / 6, abs=0.03)
    assert first[3] / n == pytest.approx(1 / 6, abs=0.03)
    # Not one order reused: several different orders appear.
    assert len(set(orders)) == 6


def test_fetch_orders_matches_shuffle_uniq_for_the_same_seed():
    names = ["a", "b", "c"]
    weighted = ["a", "a", "b", "c", "c", "c"]
    rng = random.Random(99)
    expected = []
    for _ in range(50):
        pool = list(weighted)
        rng.shuffle(pool)
        expected.extend(names.index(q) + 1 for q in dict.fromkeys(pool))
    assert fetch_orders(names, weighted, False, 50, random.Random(99)) == expected


def test_weighted_reserve_takes_each_job_by_its_own_order(r, make_fetcher):
    # Given three non-empty queues and a fetcher with a seeded random source
    names = ("a", "b", "c")
    weighted = ("a", "a", "a", "b", "b", "c")
    f = make_fetcher(queues=names, weighted=weighted, strict=False)
    for q in names:
        r.lpush(f"queue:{q}", *(job(i, q) for i in range(20)))
    f.rng = random.Random(4242)
    # When 12 jobs are reserved in one call
    got = f.reserve(12)
    # Then job i came from the first queue of order i
    orders = fetch_orders(names, weighted, False, 12, random.Random(4242))
    expected = [names[orders[i * 3] - 1] for i in range(12)]
    assert [g.queue for g in got] == expected
    assert len(set(expected)) > 1  # the seed gives a mixed sequence, so order matters


# --- ack ---------------------------------------------------------------------------------------

def test_ack_is_written_behind_and_lands_on_flush(r, fetcher):
    r.lpush("queue:default", job(1), job(2))
    a, b = fetcher.reserve(2)
    fetcher.ack(a)
    fetcher.flush()
    assert r.zrange(RESERVED, 0, -1) == [b.member]
    fetcher.ack(b)
    fetcher.flush()
    assert r.zcard(RESERVED) == 0


@pytest.mark.parametrize("send", ["send_acks", "flush", "reserve", "block", "script"])
def test_before_ends_is_called_before_any_call_that_carries_acks(r, fetcher, send, tmp_path):
    # (the worker writes the done lines of the jobs acked there: RT12)
    from queued.connection import Script
    (tmp_path / "one.lua").write_text("return 1")
    one = Script(str(tmp_path), "one")
    r.lpush("queue:default", job(1), job(2))
    a, b = fetcher.reserve(2)
    fetcher.ack(a)
    seen = []
    fetcher.before_ends = lambda: seen.append(r.zrange(RESERVED, 0, -1))
    {"send_acks": fetcher.send_acks, "flush": fetcher.flush,
     "reserve": lambda: fetcher.reserve(1), "block": lambda: fetcher.block(),
     "script": lambda: fetcher.run_script(one, [], [])}[send]()
    fetcher.flush()
    assert seen == [[a.member, b.member]]  # (once, with the ack not yet applied)
    assert r.zrange(RESERVED, 0, -1) == [b.member]


def test_no_acks_no_before_ends(r, fetcher):
    r.lpush("queue:default", job(1))
    seen = []
    fetcher.before_ends = lambda: seen.append(1)
    fetcher.reserve(1)
    fetcher.send_acks()
    fetcher.flush()
    assert seen == []


def test_a_lease_renewal_inside_a_job_carries_no_acks(r, fetcher):
    # (ops.touch: writing the held done lines there waited on the log under the job's time
    # limit and the logging handler's lock: RT13)
    r.lpush("queue:default", job(1))
    (a,) = fetcher.reserve(1)
    fetcher.ack(a)
    seen = []
    fetcher.before_ends = lambda: seen.append("lines")
    r.set("lease-of-the-test", 1)
    assert fetcher.renew_lease("lease-of-the-test", 10_000)
    assert seen == [] and r.zrange(RESERVED, 0, -1) == [a.member]
    fetcher.send_acks()
    fetcher.flush()
    assert seen == ["lines"] and r.zcard(RESERVED) == 0


def test_ack_then_reserve_in_sequence(r, fetcher):
    r.lpush("queue:default", job(1), job(2), job(3))
    for i in (1, 2, 3):
        (res,) = fetcher.reserve(1)
        assert res.payload == job(i)
        # the previous ack went out ahead of this reserve on the same connection
        assert r.zrange(RESERVED, 0, -1) == [res.member]
        fetcher.ack(res)
    assert fetcher.reserve(1) == []
    assert r.zcard(RESERVED) == 0


def test_ack_of_a_member_no_longer_reserved_logs_a_warning(r, fetcher, caplog):
    r.lpush("queue:default", job(1))
    (res,) = fetcher.reserve(1)
    r.zrem(RESERVED, res.member)  # recovered by someone else meanwhile
    with caplog.at_level(logging.WARNING, logger="queued.fetch"):
        fetcher.ack(res)
        fetcher.flush()
    warnings = [rec for rec in caplog.records
                if rec.name == "queued.fetch" and rec.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "reservation" in warnings[0].getMessage()


def test_a_normal_ack_logs_nothing(r, fetcher, caplog):
    r.lpush("queue:default", job(1))
    (res,) = fetcher.reserve(1)
    with caplog.at_level(logging.WARNING, logger="queued.fetch"):
        fetcher.ack(res)
        fetcher.flush()
    assert [rec for rec in caplog.records if rec.name == "queued.fetch"] == []


# --- block -------------------------------------------------------------------------------------

def _worker_is_blocked(r) -> bool:
    for c in r.client_list():
        if c.get("name") == "queued-worker-0" and c.get("cmd") == "blmove":
            return True
    return False


def test_block_wakes_when_a_job_is_pushed_and_lands_it(r, redis_url, make_fetcher):
    # Given a worker that blocks for up to 30 s, and a job pushed once it is seen blocking
    f = make_fetcher(block=30.0)
    f.reserve(1)  # open the connection, so the pusher can see it block
    pusher = redis_lib.Redis.from_url(redis_url)

    def push_when_blocked():
        wait_for(lambda: _worker_is_blocked(pusher), what="the worker to block")
        pusher.lpush("queue:default", job(1))

    t = threading.Thread(target=push_when_blocked)
    t.start()
    # When the worker blocks on the empty queue
    woke = f.block()
    t.join(5)
    pusher.close()
    # Then block returns the job's bytes (the push woke it: its timeout returns None), the
    # job sits in the slot's landing list ...
    assert woke == job(1)
    landing = K.landing(IDENTITY, 0, "default")
    assert r.lrange(landing, 0, -1) == [job(1)]
    assert r.llen("queue:default") == 0
    # ... and reserve(1, queue) moves it into the reserved set
    (res,) = f.reserve(1, "default")
    assert res.payload == job(1) and res.queue == "default"
    assert r.llen(landing) == 0
    assert r.zrange(RESERVED, 0, -1) == [res.member]


def test_block_returns_none_after_the_block_timeout(r, fetcher):
    # Given a fetcher whose block_seconds is 0.2, and the command it sends recorded
    sent = []
    real = fetcher._call

    def spy(*args, **kwargs):
        sent.append(args)
        return real(*args, **kwargs)

    fetcher._call = spy
    # When it blocks on an empty queue
    t0 = time.monotonic()
    assert fetcher.block() is None
    # Then it asked Redis to wait block_seconds, and Redis did wait before answering None
    landing = K.landing(IDENTITY, 0, "default")
    assert sent == [("BLMOVE", "queue:default", landing, "RIGHT", "LEFT", 0.2)]
    assert time.monotonic() - t0 >= 0.15
    assert r.llen(landing) == 0


def test_landed_jobs_come_first_in_the_next_reserve(r, fetcher):
    r.lpush("queue:default", job(1))
    assert fetcher.block() == job(1)
    r.lpush("queue:default", job(2))
    got = fetcher.reserve(2)
    assert [g.payload for g in got] == [job(1), job(2)]


# --- a job started as it landed (reserve_landed + claim) -----------------------------------------

def test_a_landed_job_is_reserved_without_waiting_and_claimed_after_it_ran(r, fetcher):
    # Given a finished job whose ack is pending, and a job that landed while the worker idled
    r.lpush("queue:default", job(0))
    (done,) = fetcher.reserve(1)
    fetcher.ack(done)
    r.lpush("queue:default", job(1))
    landed = fetcher.block()
    # When the reserve call is sent (the ack rides in it) and the job runs meanwhile
    fetcher.reserve_landed()
    # Then nothing else goes out on the connection before its reply is read
    fetcher.send_acks()
    # And claiming the job reads the reply: the job is reserved, the ack went through
    res = fetcher.claim(landed, succeeded=True)
    assert res is not None and res.payload == job(1) and res.queue == "default"
    assert r.zrange(RESERVED, 0, -1) == [res.member]
    assert r.llen(K.landing(IDENTITY, 0, "default")) == 0
    fetcher.ack(res)
    assert fetcher.reserve(5) == [] and r.zcard(RESERVED) == 0


def test_jobs_adopted_with_a_landed_job_come_out_of_the_next_reserve(r, fetcher):
    # Given a reservation whose reply was lost earlier (it sits in the zset, unknown to us)
    r.zadd(RESERVED, {b"default\0lost\0" + job(7): 1})
    r.lpush("queue:default", job(1))
    landed = fetcher.block()
    fetcher.reserve_landed()
    # When the landed job is claimed, the adopted one is kept for the next reserve
    assert fetcher.claim(landed, succeeded=True).payload == job(1)
    assert [g.payload for g in fetcher.reserve(5)] == [job(7)]


def test_a_landed_job_whose_reply_was_lost_is_acked_not_run_again(r, fetcher):
    # Given a landed job started at once, and its reserve reply lost (connection killed)
    r.lpush("queue:default", job(1))
    landed = fetcher.block()
    fetcher.reserve_landed()
    wait_for(lambda: r.zcard(RESERVED) == 1, what="Redis to run the call")  # then it goes
    fetcher._conn._sock.close()
    # When the job succeeded and is claimed: no reservation, nothing raised
    assert fetcher.claim(landed, succeeded=True) is None
    # Then the next reserve acks it when Redis hands it back, instead of running it twice
    r.lpush("queue:default", job(2))
    assert [g.payload for g in fetcher.reserve(5)] == [job(2)]
    fetcher.flush()
    assert [m.split(b"\0")[-1] for m in r.zrange(RESERVED, 0, -1)] == [job(2)]


def test_a_landed_job_that_failed_and_lost_its_reply_runs_again(r, fetcher):
    r.lpush("queue:default", job(1))
    landed = fetcher.block()
    fetcher.reserve_landed()
    wait_for(lambda: r.zcard(RESERVED) == 1, what="Redis to run the call")
    fetcher._conn._sock.close()
    assert fetcher.claim(landed, succeeded=False) is None
    assert [g.payload for g in fetcher.reserve(5)] == [job(1)]


def test_a_job_landed_from_another_queue_whose_reply_was_lost_is_handed_over_next(
        r, make_fetcher):
    # Given slot 0 (its own queue "a") blocking on queue "b", and BLMOVE's reply lost
    f = make_fetcher(queues=("a", "b"))
    r.lpush("queue:b", job(1, "b"))
    assert f.block("b") == job(1, "b")
    f.reset_connection()  # as after a broken connection: the worker never saw the job
    assert r.lrange(K.landing(IDENTITY, 0, "b"), 0, -1) == [job(1, "b")]
    # When the worker reserves again (it does before it blocks again)
    got = f.reserve(5)
    # Then the job in b's landing list is handed over, not stranded there
    assert [(g.queue, g.payload) for g in got] == [("b", job(1, "b"))]
    assert r.llen(K.landing(IDENTITY, 0, "b")) == 0


def test_idle_slots_spread_over_the_queues(make_fetcher):
    qs = ("a", "b", "c")
    assert [make_fetcher(queues=qs, slot=s).block_queue for s in range(4)] == ["a", "b", "c", "a"]


# --- fail --------------------------------------------------------------------------------------

def test_fail_retry_writes_retry_and_drops_the_reservation(r, fetcher):
    r.lpush("queue:default", job(1))
    (res,) = fetcher.reserve(1)
    score = time.time() + 100.123456
    assert fetcher.fail(res, "retry", score, '{"new":"payload"}') == WRITTEN
    assert r.zrange("retry", 0, -1, withscores=True) == [(b'{"new":"payload"}', score)]
    assert r.zcard(RESERVED) == 0
    assert r.zcard("dead") == 0


def test_fail_dead_writes_dead(r, fetcher):
    r.lpush("queue:default", job(1))
    (res,) = fetcher.reserve(1)
    now = time.time()
    assert fetcher.fail(res, "dead", now, job(1)) == WRITTEN
    assert r.zrange("dead", 0, -1, withscores=True) == [(job(1), now)]
    assert r.zcard(RESERVED) == 0
    assert r.zcard("retry") == 0


def test_fail_drop_writes_nothing_but_releases(r, fetcher):
    r.lpush("queue:default", job(1))
    (res,) = fetcher.reserve(1)
    assert fetcher.fail(res, "drop", time.time(), job(1)) == WRITTEN
    assert r.zcard(RESERVED) == 0
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0


@pytest.mark.parametrize("kind", ["retry", "dead", "drop"])
def test_fail_of_a_recovered_reservation_writes_nothing(r, fetcher, kind):
    r.lpush("queue:default", job(1))
    (res,) = fetcher.reserve(1)
    r.zrem(RESERVED, res.member)
    assert fetcher.fail(res, kind, time.time(), job(1)) == GONE
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0


def test_fail_keeps_the_other_reservations(r, fetcher):
    r.lpush("queue:default", job(1), job(2))
    a, b = fetcher.reserve(2)
    fetcher.fail(a, "retry", time.time(), job(1))
    assert r.zrange(RESERVED, 0, -1) == [b.member]


def test_dead_is_trimmed_like_sidekiq(r, make_fetcher):
    # Given a dead set with two expired entries and five recent ones, and a copy of it
    timeout, max_jobs = 100, 4
    f = make_fetcher(dead_timeout=timeout, dead_max=max_jobs)
    now = time.time()
    entries = {b"old1": now - 500, b"old2": now - 101}
    entries.update({f"recent{i}".encode(): now - 50 + i for i in range(5)})
    r.zadd("dead", entries)
    r.zadd("dead_ref", entries)
    r.lpush("queue:default", job(1))
    (res,) = f.reserve(1)
    # When a job dies
    assert f.fail(res, "dead", now, job(1)) == WRITTEN
    # Then dead is what Sidekiq's DeadSet#kill commands leave
    r.zadd("dead_ref", {job(1): now})
    r.zremrangebyscore("dead_ref", "-inf", now - timeout)
    r.zremrangebyrank("dead_ref", 0, -max_jobs)
    assert r.zrange("dead", 0, -1, withscores=True) == r.zrange("dead_ref", 0, -1, withscores=True)
    members = r.zrange("dead", 0, -1)
    assert b"old1" not in members and b"old2" not in members
    assert members[-1] == job(1)
    assert len(members) == max_jobs - 1  # ZREMRANGEBYRANK 0 -max keeps max - 1


def test_dead_trim_by_score_alone(r, make_fetcher):
    f = make_fetcher(dead_timeout=100, dead_max=10000)
    now = time.time()
    r.zadd("dead", {b"ancient": now - 1000, b"fresh": now - 10})
    r.lpush("queue:default", job(1))
    (res,) = f.reserve(1)
    f.fail(res, "dead", now, job(1))
    assert r.zrange("dead", 0, -1) == [b"fresh", job(1)]


def test_retry_does_not_trim_dead(r, make_fetcher):
    f = make_fetcher(dead_timeout=100, dead_max=1)
    now = time.time()
    r.zadd("dead", {b"ancient": now - 1000, b"a": now, b"b": now})
    r.lpush("queue:default", job(1))
    (res,) = f.reserve(1)
    f.fail(res, "retry", now, job(1))
    assert r.zcard("dead") == 3


# --- connection resets ---------------------------------------------------------------------
# Acks are written behind: they may still be in memory, or sent with no reply read, when the
# connection goes. Either way the job must end up released exactly once it is acked.

def test_pending_acks_are_resent_after_reset_connection(r, fetcher):
    # Given two reserved jobs and an ack whose reply was never read
    r.lpush("queue:default", job(1), job(2))
    a, b = fetcher.reserve(2)
    fetcher.ack(a)
    # When the connection is reset (an error, an interrupted block)
    fetcher.reset_connection()
    # Then the next call sends the ack again before its own command (b, still held, is
    # handed back first: the worker holds nothing but its acks when it reserves)
    assert [g.member for g in fetcher.reserve(1)] == [b.member]
    assert r.zrange(RESERVED, 0, -1) == [b.member]


def test_pending_acks_are_resent_by_flush_after_reset_connection(r, fetcher):
    # Given an ack that never reached Redis and a reset connection (as after _Wake on TERM)
    r.lpush("queue:default", job(1))
    (a,) = fetcher.reserve(1)
    fetcher.ack(a)
    fetcher.reset_connection()
    # When the worker flushes before exit (close() calls flush())
    fetcher.flush()
    # Then the ack is sent: "before exit, so none is left unsent"
    assert r.zcard(RESERVED) == 0


def _kill_worker_connection(r):
    for c in r.client_list():
        if c.get("name") == "queued-worker-0":
            r.execute_command("CLIENT", "KILL", "ID", c["id"])
            return
    raise AssertionError("worker connection not found")


def _reserve_after_reconnecting(fetcher, n=1):
    """reserve(n) as Worker._loop retries it: the first try may meet the broken connection."""
    for _ in range(3):
        try:
            return fetcher.reserve(n)
        except (redis_lib.ConnectionError, redis_lib.TimeoutError, OSError):
            continue
    raise AssertionError("fetcher never reconnected")


def test_acks_survive_a_killed_connection(r, fetcher):
    # Given reserved jobs and the worker's connection killed by the server
    r.lpush("queue:default", job(1), job(2), job(3))
    a, b, c = fetcher.reserve(3)
    _kill_worker_connection(r)
    # When the worker acks and goes on (the first call may see the error, as in Worker._loop)
    fetcher.ack(a)
    got = _reserve_after_reconnecting(fetcher)
    # Then the ack reached Redis on the new connection, and nothing else changed (b and c,
    # still held, are handed back, earliest first)
    assert [g.member for g in got] == [b.member, c.member]
    assert r.zrange(RESERVED, 0, -1) == [b.member, c.member]


def test_an_ack_during_an_outage_is_kept_and_sent_later(r, fetcher):
    # Given a finished job whose ack is pending, and Redis unreachable: every connection the
    # worker opens fails (counted, so the test knows the outage was really met)
    r.lpush("queue:default", job(1), job(2))
    (a,) = fetcher.reserve(1)
    fetcher.ack(a)
    fetcher.reset_connection()
    tries = []

    def broken(*args, **kwargs):
        tries.append(args)
        raise redis_lib.ConnectionError("Redis is away")

    real = fetcher.redis.connection_pool.get_connection
    fetcher.redis.connection_pool.get_connection = broken
    try:
        # When the worker's next calls meet the outage (its reserve, as Worker._loop retries
        # it, and the flush before it exits)
        with pytest.raises(redis_lib.ConnectionError):
            fetcher.reserve(1)
        with pytest.raises(redis_lib.ConnectionError):
            fetcher.flush()
    finally:
        fetcher.redis.connection_pool.get_connection = real
    assert len(tries) == 2  # both calls went for the broken connection
    # Then the job stayed reserved through the outage (never released early, nothing lost)
    assert r.zrange(RESERVED, 0, -1) == [a.member]
    # And the first call after it sends the ack: the job is released once, and the next job
    # is reserved in the same call
    got = fetcher.reserve(1)
    assert [g.payload for g in got] == [job(2)]
    assert r.zrange(RESERVED, 0, -1) == [got[0].member]


def test_reserve_and_ack_batches_larger_than_one_command_takes(r, make_fetcher):
    """reserve.lua passes acks, pops and adds many at a time (one ZREM, one RPOP with a count,
    one ZADD), in chunks of 1,000 arguments because Lua's unpack() is bounded: a batch of
    1,200 crosses the chunk edges of all three and loses or repeats nothing."""
    f = make_fetcher(queues=("a", "b"))  # strict: all of a, then b
    r.lpush("queue:a", *(job(i, "a") for i in range(700)))
    r.lpush("queue:b", *(job(i, "b") for i in range(700, 1500)))
    got = f.reserve(1200)
    assert [g.payload for g in got] == [job(i, "a") for i in range(700)] + \
        [job(i, "b") for i in range(700, 1200)]
    assert r.zcard(RESERVED) == 1200 and r.llen("queue:a") == 0 and r.llen("queue:b") == 300
    assert [m for m, _ in reserved(r)] == [g.member for g in got]  # scores in run order
    for g in got:
        f.ack(g)
    rest = f.reserve(1000)
    assert [g.payload for g in rest] == [job(i, "b") for i in range(1200, 1500)]
    assert r.zcard(RESERVED) == 300  # the 1,200 acks all found their reservation


def test_reserve_survives_a_script_flush(r, fetcher):
    r.lpush("queue:default", job(1), job(2))
    (first,) = fetcher.reserve(1)
    fetcher.ack(first)
    r.script_flush()
    (res,) = fetcher.reserve(1)
    assert res.payload == job(2)
    res2 = Reservation(res.member, res.queue, res.payload)
    assert res2 == res and hash(res2) == hash(res) and len({res, res2}) == 1  # (as the tuple)
    r.script_flush()
    assert fetcher.fail(res2, "retry", time.time(), job(2)) == WRITTEN


def test_an_ack_goes_out_before_the_worker_blocks(r, fetcher):
    r.lpush("queue:default", job(1))
    (a,) = fetcher.reserve(1)
    fetcher.ack(a)
    assert fetcher.block() is None  # idle for block_seconds with nothing acked would be wrong
    assert r.zcard(RESERVED) == 0


def test_an_ack_goes_out_with_a_failure(r, fetcher):
    r.lpush("queue:default", job(1), job(2))
    a, b = fetcher.reserve(2)
    fetcher.ack(a)
    assert fetcher.fail(b, "retry", time.time(), job(2)) == WRITTEN
    assert r.zcard(RESERVED) == 0
    assert r.zrange("retry", 0, -1) == [job(2)]


# --- acks sent ahead between the jobs of a batch ---------------------------------------------

def test_send_acks_releases_a_finished_job_while_the_batch_goes_on(r, fetcher):
    # Given a batch of three; the first one finished
    r.lpush("queue:default", job(1), job(2), job(3), job(4))
    a, b, c = fetcher.reserve(3)
    fetcher.ack(a)
    # When the worker sends the acks ahead before running the next job
    fetcher.send_acks()
    # Then the finished job is released at once, not after the whole batch
    wait_for(lambda: r.zrange(RESERVED, 0, -1) == [b.member, c.member],
             what="the ack sent ahead to land")
    # And the connection stays in step: the next calls get their own replies
    fetcher.ack(b)
    fetcher.send_acks()
    fetcher.ack(c)
    (d,) = fetcher.reserve(1)
    assert d.payload == job(4)
    assert r.zrange(RESERVED, 0, -1) == [d.member]
    assert fetcher.fail(d, "retry", time.time(), job(4)) == WRITTEN
    assert r.zcard(RESERVED) == 0


def test_send_acks_then_flush_reads_every_reply(r, fetcher, caplog):
    r.lpush("queue:default", job(1), job(2))
    a, b = fetcher.reserve(2)
    r.zrem(RESERVED, a.member)  # a was recovered by someone else meanwhile
    fetcher.ack(a)
    with caplog.at_level(logging.WARNING, logger="queued.fetch"):
        fetcher.send_acks()
        fetcher.ack(b)
        fetcher.flush()
    assert r.zcard(RESERVED) == 0
    warnings = [x for x in caplog.records
                if x.name == "queued.fetch" and x.levelno == logging.WARNING]
    assert len(warnings) == 1  # one for a, none for b
    assert fetcher.block() is None  # and the connection is still in step


def test_acks_sent_ahead_survive_a_reset(r, fetcher):
    r.lpush("queue:default", job(1), job(2))
    a, b = fetcher.reserve(2)
    fetcher.ack(a)
    fetcher.send_acks()
    fetcher.reset_connection()  # the reply was never read
    assert [g.member for g in fetcher.reserve(1)] == [b.member]
    assert r.zrange(RESERVED, 0, -1) == [b.member]


def test_send_acks_never_raises_when_redis_is_away(r, fetcher):
    r.lpush("queue:default", job(1))
    (a,) = fetcher.reserve(1)
    fetcher.reset_connection()
    real = fetcher.redis.connection_pool.get_connection

    def broken(*args, **kwargs):
        raise redis_lib.ConnectionError("Redis is away")

    fetcher.redis.connection_pool.get_connection = broken
    fetcher.ack(a)
    fetcher.send_acks()
    fetcher.redis.connection_pool.get_connection = real
    assert r.zcard(RESERVED) == 1  # still reserved: never lost, never released early
    fetcher.flush()
    assert r.zcard(RESERVED) == 0


# --- a queue key of the wrong type -------------------------------------------------------------
# RPOP on a key that is not a list is a WRONGTYPE error; reserve.lua skips such a queue and
# names it, instead of failing every fetch of every worker.

def test_reserve_skips_a_queue_whose_key_is_not_a_list_and_names_it(r, make_fetcher):
    # Given strict queues [broken, default] where queue:broken is a string
    f = make_fetcher(queues=("broken", "default"))
    r.set("queue:broken", "x")
    r.lpush("queue:default", job(1), job(2))
    # When jobs are reserved
    got = f.reserve(3)
    # Then the other queue is served, and the broken one is named once
    assert [g.payload for g in got] == [job(1), job(2)]
    assert f.bad_queues == ["broken"]
    assert f.checked_all is True
    assert r.get("queue:broken") == b"x"  # left as it is
    # And once the key is fixed it is served again and no longer named
    for g in got:
        f.ack(g)
    r.delete("queue:broken")
    r.lpush("queue:broken", job(3, "broken"))
    (res,) = f.reserve(1)
    assert res.queue == "broken" and f.bad_queues == []


def test_weighted_reserve_skips_a_broken_queue_for_every_job(r, make_fetcher):
    names = ("a", "b", "c")
    f = make_fetcher(queues=names, weighted=("a", "b", "b", "c"), strict=False)
    r.hset("queue:b", "not", "a list")
    for q in ("a", "c"):
        r.lpush(f"queue:{q}", *(job(i, q) for i in range(10)))
    got = f.reserve(8)
    assert len(got) == 8 and {g.queue for g in got} <= {"a", "c"}
    assert f.bad_queues in ([], ["b"])  # named if some job's order tried it
    for g in got:
        f.ack(g)
    got = f.reserve(20)  # drains a and c: every order tried b
    assert len(got) == 12 and f.bad_queues == ["b"] and f.checked_all


def test_a_queue_that_is_not_a_list_is_not_named_when_it_is_not_tried(r, make_fetcher):
    # Strict order stops at the first queue with a job: the broken one after it is not looked
    # at, so the check is incomplete
    f = make_fetcher(queues=("default", "broken"))
    r.set("queue:broken", "x")
    r.lpush("queue:default", job(1))
    assert len(f.reserve(1)) == 1
    assert f.bad_queues == [] and f.checked_all is False


def test_every_field_of_one_reserve_reply_is_read_from_its_place(r, make_fetcher, caplog):
    """reserve.lua answers one flat array (counts first, then the members, then the names of
    the broken and the paused queues): one call that has adopted members, landed jobs, a
    broken queue and paused queues, each count different, checks that each is read right."""
    # Given strict queues where p1 and p2 are paused (with jobs) and queue:broken is a string
    f = make_fetcher(queues=("p1", "broken", "p2", "default"))
    r.sadd(K.paused, "p1", "p2")
    r.set("queue:broken", "x")
    r.lpush("queue:p1", job(8, "p1"))
    r.lpush("queue:p2", job(9, "p2"))
    # And a job that landed and succeeded while the reserve call sent for it never ran
    # (NOSCRIPT, then the connection broke): it is to be acked, not run, when it comes out
    # among the jobs the slot held (adopted + landed: the last of 3 landed ones here)
    r.script_flush()
    r.lpush("queue:default", job(1))
    landed = f.block("default")
    f.reserve_landed()
    f._conn._sock.close()
    assert f.claim(landed, succeeded=True) is None
    landing = K.landing(IDENTITY, 0, "default")
    r.rpush(landing, job(2), job(3))  # taken before job(1): RPOP takes the right end first
    # And 2 reservations of a call whose reply was lost, and a job in the queue
    r.zadd(RESERVED, {b"default\0lost-a\0" + job(6): 1, b"default\0lost-b\0" + job(7): 2})
    r.lpush("queue:default", job(4))
    # When the worker reserves
    with caplog.at_level(logging.WARNING, logger="queued.server.fetch"):
        got = f.reserve(10)
    # Then the adopted ones come first, the landed ones next (job(1) acked: held = 2 + 3),
    # then the queue's; the broken queue and the paused ones are named apart
    assert [g.payload for g in got] == [job(6), job(7), job(3), job(2), job(4)]
    assert f.bad_queues == ["broken"]
    assert f.paused == ["p1", "p2"]
    assert f.registered is True and f.checked_all is True
    assert [m.getMessage() for m in caplog.records if "reply was lost" in m.getMessage()] == [
        "2 job(s) reserved by a call whose reply was lost (the connection broke) are run now"]
    f.flush()
    assert sorted(m.split(b"\0", 2)[2] for m in r.zrange(RESERVED, 0, -1)) == sorted(
        [job(6), job(7), job(3), job(2), job(4)])
    assert r.llen("queue:p1") == 1 and r.llen("queue:p2") == 1 and r.llen(landing) == 0
    # And once the queue is mended, a call that names no broken queue still reads as registered
    for g in got:
        f.ack(g)
    r.delete("queue:broken")
    assert f.reserve(10) == [] and r.zcard(RESERVED) == 0
    # (acked read from its place: all 6 acks of that call, job(1)'s too, found their
    # reservation, else the worker would warn that they had lost it)
    assert [m for m in caplog.messages if "lost their reservation" in m] == []
    assert f.bad_queues == [] and f.paused == ["p1", "p2"]
    assert f.registered is True and f.checked_all is True
    # And with the master's registration gone, the call says so and takes nothing
    r.hdel(K.masters, IDENTITY)
    r.lpush("queue:default", job(5))
    assert f.reserve(10) == [] and f.registered is False and f.checked_all is False
    assert f.bad_queues == [] and f.paused == [] and r.llen("queue:default") == 1


def test_block_on_a_queue_whose_key_is_not_a_list_raises_and_the_connection_stays_usable(
        r, make_fetcher):
    f = make_fetcher(queues=("broken", "default"))
    assert f.block_queue == "broken"
    r.set("queue:broken", "x")
    with pytest.raises(redis_lib.ResponseError, match="WRONGTYPE"):
        f.block()
    r.lpush("queue:default", job(1))
    assert [g.payload for g in f.reserve(1)] == [job(1)]


# --- a reply that never arrived ------------------------------------------------------------
# Redis ran the reserve, the connection broke before the reply came back (Redis shut down,
# a timeout, the previous worker of the slot killed with its call in flight). The jobs sit in
# the slot, and the worker's next reserve hands them over instead of leaving them stranded.

def _lose_the_next_reply(fetcher):
    """The next reserve call runs in Redis, and its reply is lost with the connection."""
    real = fetcher._take

    def lossy(sent):
        fetcher._connection().read_response()  # Redis ran it; the reply goes nowhere
        fetcher._take = real
        fetcher.reset_connection()
        fetcher._unsent(sent)
        raise redis_lib.ConnectionError("connection closed by server")

    fetcher._take = lossy


def test_jobs_reserved_by_a_call_whose_reply_was_lost_are_handed_over_next(
        r, fetcher, caplog):
    # Given a finished job whose ack is pending, and a reserve whose reply is lost
    r.lpush("queue:default", job(1), job(2), job(3), job(4))
    (a,) = fetcher.reserve(1)
    fetcher.ack(a)
    _lose_the_next_reply(fetcher)
    with pytest.raises(redis_lib.ConnectionError):
        fetcher.reserve(2)
    assert r.zrange(RESERVED, 0, -1) != []  # Redis did reserve them
    # When the worker reserves again
    with caplog.at_level(logging.WARNING, logger="queued.fetch"):
        got = fetcher.reserve(2)
    # Then it gets the two it never heard of, first and in order, and nothing more (they
    # count toward n); the ack applied by the lost call raises no warning
    assert [g.payload for g in got] == [job(2), job(3)]
    assert r.zrange(RESERVED, 0, -1) == [g.member for g in got]
    assert r.lrange("queue:default", 0, -1) == [job(4)]
    assert [x.getMessage() for x in caplog.records] == [
        "2 job(s) reserved by a call whose reply was lost (the connection broke) are run now"]


def test_a_new_worker_of_a_slot_takes_over_what_a_late_call_of_the_old_one_reserved(
        r, make_fetcher):
    # Given the previous worker of slot 0 whose reserve ran after the master emptied the slot
    old = make_fetcher()
    r.lpush("queue:default", job(1), job(2))
    (stray,) = old.reserve(1)
    # When the new worker of the slot reserves
    new = make_fetcher()
    got = new.reserve(8)
    # Then the stray comes first, then the queue
    assert [g.payload for g in got] == [job(1), job(2)]
    assert got[0].member == stray.member


# --- Redis refusing writes -------------------------------------------------------------------
# NOREPLICAS (min-replicas-to-write), MISCONF (cannot persist), READONLY (a replica after a
# failover): the acks are error replies then. Every reply must still be read in turn, and the
# refused acks sent again later.

def _refusals(r) -> int:
    """How many commands Redis has answered NOREPLICAS so far (INFO errorstats)."""
    return r.info("errorstats").get("errorstat_NOREPLICAS", {}).get("count", 0)


@pytest.mark.parametrize("ahead", [True, False], ids=["sent-ahead", "with-the-call"])
def test_an_ack_redis_refuses_stays_pending_and_the_connection_stays_in_step(
        r, fetcher, ahead):
    r.lpush("queue:default", job(1), job(2))
    a, b = fetcher.reserve(2)
    fetcher.ack(a)
    r.config_set("min-replicas-to-write", 1)
    try:
        if ahead:
            fetcher.send_acks()
        with pytest.raises(redis_lib.ResponseError, match="NOREPLICAS"):
            fetcher.block()
        assert r.zcard(RESERVED) == 2
    finally:
        r.config_set("min-replicas-to-write", 0)
    # The next call reads its own reply (a list), the refused ack goes out with it
    got = fetcher.reserve(1)
    assert [g.member for g in got] == [b.member]  # b, still held, handed back
    assert r.zrange(RESERVED, 0, -1) == [b.member]
    assert fetcher.block() is None  # and the connection is still in step


def test_a_reserve_that_timed_out_on_a_frozen_redis_is_handed_over_once_it_runs(
        monkeypatch):
    # Given a Fetcher on a private Redis, with a 0.3 s read timeout
    import os
    import signal

    from conftest import RedisServer, find_redis_server
    from queued import connection
    monkeypatch.setattr(connection, "SOCKET_TIMEOUT", 0.3)
    server = RedisServer(find_redis_server())
    server.start()
    f = Fetcher(server.url, Keys(), IDENTITY, 0, ["default"], ["default"], True, 0.2,
                15552000, 10000)
    r = redis_lib.Redis.from_url(server.url)
    r.hset(Keys().masters, IDENTITY, "{}")  # its master's registration (reserve.lua checks)
    try:
        assert f.reserve(0) == []  # connected, script loaded
        r.lpush("queue:default", job(1), job(2))
        # When Redis is frozen (SIGSTOP) while the worker reserves: the read times out,
        # and the script runs once Redis is resumed, its reply going nowhere
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            with pytest.raises(redis_lib.TimeoutError):
                f.reserve(1)
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        # Redis runs it once resumed: job 1 sits in the slot
        wait_for(lambda: r.zcard(RESERVED) == 1, what="the timed-out reserve to run")
        # Then the next reserve hands it over first, then takes the next one
        got = f.reserve(2)
        assert [g.payload for g in got] == [job(1), job(2)]
        assert r.zrange(RESERVED, 0, -1) == [g.member for g in got]
    finally:
        f.close()
        f.redis.close()
        r.close()
        server.stop()


def test_a_finished_job_whose_ack_was_refused_is_not_handed_back_as_a_lost_one(r, fetcher):
    # Given a finished job whose ack, sent ahead, Redis refused
    r.lpush("queue:default", job(1), job(2))
    (a,) = fetcher.reserve(1)
    fetcher.ack(a)
    refused = _refusals(r)
    r.config_set("min-replicas-to-write", 1)
    try:
        fetcher.send_acks()
        wait_for(lambda: _refusals(r) > refused, what="Redis to refuse the ack")
    finally:
        r.config_set("min-replicas-to-write", 0)
    # When the worker reserves again
    got = fetcher.reserve(1)
    # Then the ack is sent again with it, and the finished job is not run again
    assert [g.payload for g in got] == [job(2)]
    assert r.zrange(RESERVED, 0, -1) == [got[0].member]


def test_an_ack_sent_ahead_whose_reply_never_came_is_sent_again_not_run_again(r, fetcher):
    # Given a finished job whose ack went out ahead on a connection the server had closed
    r.lpush("queue:default", job(1), job(2))
    (a,) = fetcher.reserve(1)
    fetcher.ack(a)
    _kill_worker_connection(r)
    fetcher.send_acks()
    # When the worker reserves (the first try may meet the broken connection, as in
    # Worker._loop)
    got = _reserve_after_reconnecting(fetcher)
    # Then the ack was sent again, and the finished job is not handed back to run again
    assert [g.payload for g in got] == [job(2)]
    assert r.zrange(RESERVED, 0, -1) == [got[0].member]


def test_a_reserve_without_adoption_leaves_running_jobs_alone_and_notes_a_lost_reply(
        r, make_fetcher):
    # Given a worker of many jobs at once, running two jobs it reserved
    f = make_fetcher()
    r.lpush("queue:default", job(1), job(2), job(3))
    running = f.reserve(2, adopt=False)
    assert [x.payload for x in running] == [job(1), job(2)]
    # When it reserves again while they run, it gets the next job only (not its own again)
    (third,) = f.reserve(2, adopt=False)
    assert third.payload == job(3) and f.lost_reply is False
    # When a reserve call runs in Redis but its reply is lost with the connection
    r.lpush("queue:default", job(4))
    sent = f._send_reserve(1, None, adopt=False)
    from harness import wait_for
    wait_for(lambda: r.llen("queue:default") == 0, 5, what="Redis to run the reserve call")
    f._conn._sock.close()
    with pytest.raises((redis_lib.ConnectionError, OSError)):
        f._take(sent)
    # Then the fetcher says so; once the worker's jobs have ended (acked), the next call
    # adopts: it hands over what the lost call took, once
    assert f.lost_reply is True
    for res in (*running, third):
        f.ack(res)
    assert [x.payload for x in f.reserve(2)] == [job(4)]
    assert f.lost_reply is False and r.zcard(K.reserved(FETCH_IDENTITY, 0)) == 1
