"""queued.Limiter against a real Redis, in this process: the counts of bucket, window and leaky
at their boundaries with an injected clock; a concurrent limiter's semaphore from threads and
coroutines, its waiters woken by a release without polling, a crashed holder's unit back after
lock_timeout; OverLimit; the wake time of an over-limit job (limit_park.lua)."""
import asyncio
import random
import threading
import time

import pytest

import queued
from harness import Monitor
from queued import limiter as lim
from queued.keys import Keys

K = Keys()


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def takes(limiter, clock, times):
    """For each time: True if a unit was granted then, False if OverLimit."""
    out = []
    for t in times:
        clock.t = t
        try:
            with limiter:
                out.append(True)
        except queued.OverLimit:
            out.append(False)
    return out


def test_a_bucket_counts_per_calendar_second_minute_hour_and_day(default_client, r):
    clock = Clock(0)
    per_minute = queued.Limiter.bucket("b-min", 3, "minute", wait_timeout=0)
    per_minute.clock = clock
    # 3 in the minute that starts at 1_000_020 (a multiple of 60), none more until it ends
    assert takes(per_minute, clock, [1_000_020, 1_000_050, 1_000_079.999, 1_000_079.9999]) \
        == [True, True, True, False]
    # The next calendar minute starts at 1_000_080 exactly: 3 more
    assert takes(per_minute, clock, [1_000_080, 1_000_080, 1_000_139, 1_000_139.5]) \
        == [True, True, True, False]
    per_day = queued.Limiter.bucket("b-day", 1, "day", wait_timeout=0)
    per_day.clock = clock
    day = 86400 * 20_000  # a UTC midnight
    assert takes(per_day, clock, [day - 1, day - 0.5, day, day + 86399.9, day + 86400]) \
        == [True, False, True, False, True]


def test_a_bucket_says_when_it_has_room(default_client, r):
    clock = Clock(1_000_000.25)
    per_second = queued.Limiter.bucket("b-sec", 1, "second", wait_timeout=0)
    per_second.clock = clock
    assert takes(per_second, clock, [1_000_000.25]) == [True]
    with pytest.raises(queued.OverLimit) as over:
        with per_second:
            pass
    assert over.value.wait == 0.75 and over.value.limiter is per_second
    assert "bucket limiter 'b-sec' is over its limit of 1" in str(over.value)


def test_a_window_counts_a_grant_for_exactly_its_interval(default_client, r):
    clock = Clock(0)
    window = queued.Limiter.window("w", 2, 10, wait_timeout=0)
    window.clock = clock
    # Grants at 100 and 101; the one at 100 counts until 110 (not at 110 itself)
    assert takes(window, clock, [100, 101, 109.999, 110, 110.5, 111, 111]) == \
        [True, True, False, True, False, True, False]
    with pytest.raises(queued.OverLimit) as over:
        clock.t = 115
        with window:
            pass
    assert over.value.wait == 5.0  # the grant at 110 leaves at 120


def test_a_leaky_bucket_takes_a_burst_then_drains_at_its_rate(default_client, r):
    clock = Clock(0)
    leaky = queued.Limiter.leaky("l", 4, 2, wait_timeout=0)  # 4 units, one drains each 0.5 s
    leaky.clock = clock
    assert takes(leaky, clock, [500, 500, 500, 500, 500]) == [True] * 4 + [False]
    # One unit has drained after 0.5 s, not before; then one each 0.5 s
    assert takes(leaky, clock, [500.499, 500.5, 500.75, 501.0, 501.0]) == \
        [False, True, False, True, False]
    assert takes(leaky, clock, [503.0]) == [True]  # drained to 0 meanwhile: a level of 1
    assert takes(leaky, clock, [503.0, 503.0, 503.0, 503.0]) == [True, True, True, False]


def test_a_rate_limiter_waits_until_it_has_room_within_wait_timeout(default_client, r):
    # Given a window of 1 per 0.3 s that may wait 1 s: the second take sleeps until the first
    # grant leaves the window, once, and is counted as a wait
    window = queued.Limiter.window("w-wait", 1, 0.3, wait_timeout=1)
    slept = []
    window._sleep = lambda s: (slept.append(s), time.sleep(s))
    with window:
        pass
    with window:
        pass
    assert len(slept) == 1 and 0 < slept[0] <= 0.3
    stats = r.hgetall(K.limiter("w-wait"))
    assert (stats[b"held"], stats[b"waited"]) == (b"1", b"1")
    assert b"overlimit" not in stats


def test_a_concurrent_limiter_holds_at_most_its_size_across_threads(default_client, r,
                                                                      redis_url):
    # Given 20 threads taking a unit of a limiter of 3 and counting themselves in Redis
    limiter = queued.Limiter.concurrent("c-threads", 3, wait_timeout=30)
    levels = []

    def job():
        c = queued.Client(url=redis_url)
        for _ in range(3):
            with limiter:
                levels.append(c.redis.incr("t:in"))
                time.sleep(0.01)
                c.redis.decr("t:in")
        c.redis.close()

    threads = [threading.Thread(target=job) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(levels) == 60 and max(levels) == 3
    assert r.zcard(K.limiter("c-threads", "leases")) == 0
    assert limiter.held() == 0


def test_a_concurrent_limiter_holds_at_most_its_size_across_coroutines(default_client, r,
                                                                         redis_url):
    limiter = queued.Limiter.concurrent("c-async", 3, wait_timeout=30)

    async def main():
        import redis.asyncio as aioredis
        a = aioredis.Redis.from_url(redis_url)
        levels = []

        async def job():
            for _ in range(3):
                async with limiter:
                    levels.append(await a.incr("t:in"))
                    await asyncio.sleep(0.01)
                    await a.decr("t:in")

        await asyncio.gather(*(job() for _ in range(20)))
        await a.aclose()
        return levels

    levels = asyncio.run(main())
    assert len(levels) == 60 and max(levels) == 3
    assert r.zcard(K.limiter("c-async", "leases")) == 0


def test_a_waiter_gets_a_released_unit_without_polling(default_client, r, redis_url):
    # Given a limiter of 1 held here, and a waiter in another thread
    limiter = queued.Limiter.concurrent("c-wake", 1, wait_timeout=10, lock_timeout=30)
    r.script_load(lim.CONCURRENT_TAKE.source)  # (so every take is one EVALSHA)
    monitor = Monitor(redis_url)
    try:
        got = threading.Event()
        held = threading.Event()

        def waiter():
            client = queued.Client(url=redis_url)
            mine = queued.Limiter.concurrent("c-wake", 1, wait_timeout=10, client=client)
            with mine:
                got.set()
                held.wait(10)
            client.redis.close()

        limiter.acquire()
        thread = threading.Thread(target=waiter)
        thread.start()
        # ... which blocks in BLPOP on the wake list
        from harness import wait_for
        wait_for(lambda: any("BLPOP" in cmd for _, cmd in monitor.commands()), 5,
                 what="the waiter to block")
        time.sleep(0.3)  # (long enough for a poller to show itself)
        assert not got.is_set()
        # When the unit is released, the waiter has it
        limiter.release()
        assert got.wait(5)
        held.set()
        thread.join(5)
        # Then the waiter tried to take a unit exactly twice (refused, then granted after
        # the release woke it), and blocked once: no polling
        seen = monitor.sync()
        takes = [cmd for _, cmd in seen if cmd.startswith("EVALSHA")
                 and lim.CONCURRENT_TAKE.sha in cmd]
        blocks = [cmd for _, cmd in seen if cmd.startswith("BLPOP")]
        assert len(takes) == 3  # the holder's one, the waiter's two
        assert len(blocks) == 1
    finally:
        monitor.close()


def test_a_crashed_holders_unit_comes_back_after_lock_timeout(default_client, r):
    # Given a unit taken by a holder that never gives it back (it crashed: its token is lost)
    limiter = queued.Limiter.concurrent("c-crash", 1, wait_timeout=5, lock_timeout=0.4)
    limiter.acquire()
    limiter._held.set(())  # (forgotten: as a killed process forgets it)
    began = time.monotonic()
    # When another wants it: it waits until the lease ends (not the whole wait_timeout:
    # its BLPOP lasts until the earliest lease's end), then has it
    with limiter:
        waited = time.monotonic() - began
    assert 0.3 < waited < 2
    assert r.hget(K.limiter("c-crash"), "reclaimed") == b"1"


def test_overlimit_after_wait_timeout_and_counted(default_client, r):
    limiter = queued.Limiter.concurrent("c-over", 1, wait_timeout=0.2)
    limiter.acquire()
    began = time.monotonic()
    with pytest.raises(queued.OverLimit) as over:
        with queued.Limiter.concurrent("c-over", 1, wait_timeout=0.2):
            pass
    assert 0.19 < time.monotonic() - began < 2
    assert over.value.wait is None
    assert r.hget(K.limiter("c-over"), "overlimit") == b"1"
    limiter.release()
    assert r.zcard(K.limiter("c-over", "leases")) == 0


def test_the_wake_times_of_overlimit_jobs_follow_the_limiters_rate(default_client, r):
    # Given a window of 2 per 10 s (one unit each 5 s) full until 1_000_010
    clock = Clock(1_000_000)
    window = queued.Limiter.window("w-park", 2, 10, wait_timeout=0)
    window.clock = clock
    rand = random.Random(4)
    wakes = []
    for i in range(4):
        ks, args = window.park_call(K, f"job{i}", 1, wait=10.0, rand=rand)
        wakes.append(float(lim.PARK(r, ks, args)) - 1_000_000)
    # Then they wake from the moment it has room, one each 5 s (plus up to 5 s of jitter),
    # each before its cap (300 + rand(300) + 1 s)
    for i, wake in enumerate(wakes):
        assert 10 + 5 * i <= wake < 10 + 5 * i + 5
    assert r.hget(K.limiter("w-park"), "rescheduled") == b"4"
    assert r.get(K.counter("overlimit")) == b"4"


def test_a_concurrent_overlimit_job_is_parked_unless_a_unit_is_free_now(default_client, r):
    clock = Clock(2_000_000)
    limiter = queued.Limiter.concurrent("c-park", 1, wait_timeout=0, lock_timeout=60)
    limiter.clock = clock
    # A unit is free now (released between the OverLimit and the park): it runs again at once
    ks, args = limiter.park_call(K, "free", 1, None, random.Random(1))
    assert float(lim.PARK(r, ks, args)) - 2_000_000 < lim.WAKE_JITTER
    assert r.zcard(K.limiter("c-park", "parked")) == 0
    # All held: it is parked until a release, at the latest until the holder's lease ends
    # (lock_timeout: a crashed holder's unit comes back then), before the backoff's cap
    limiter.acquire()
    ks, args = limiter.park_call(K, "parked", 2, None, random.Random(1))
    wake = float(lim.PARK(r, ks, args)) - 2_000_000
    assert 60.01 <= wake < 60.01 + lim.WAKE_JITTER
    assert r.zrange(K.limiter("c-park", "parked"), 0, -1) == [b"parked"]
    # The release brings its schedule entry forward to now (and unparks it)
    r.zadd(K.schedule, {"parked": 2_000_000 + wake})
    limiter.release()
    assert r.zscore(K.schedule, "parked") - 2_000_000 < lim.WAKE_JITTER
    assert r.zcard(K.limiter("c-park", "parked")) == 0


def test_limiter_definitions_are_checked():
    with pytest.raises(ValueError, match="name"):
        queued.Limiter.concurrent("has space", 1)
    with pytest.raises(ValueError, match="name"):
        queued.Limiter.concurrent("{brace}", 1)
    with pytest.raises(ValueError, match="size"):
        queued.Limiter.window("w", 0, 1)
    with pytest.raises(ValueError, match="interval"):
        queued.Limiter.bucket("b", 1, "week")
    with pytest.raises(ValueError, match="seconds"):
        queued.Limiter.leaky("l", 1, 0)
    with pytest.raises(ValueError, match="lock_timeout"):
        queued.Limiter.concurrent("c", 1, lock_timeout=0)


@pytest.mark.parametrize("huge", [1e300, float("inf"), 10**400, 315360001])
def test_limiter_times_past_ten_years_are_refused_at_the_definition(huge):
    # (lock_timeout=1e300 was taken, then every take failed in Redis: rt3 #2)
    for make, what in (
            (lambda: queued.Limiter.concurrent("c", 1, lock_timeout=huge), "lock_timeout"),
            (lambda: queued.Limiter.concurrent("c", 1, wait_timeout=huge), "wait_timeout"),
            (lambda: queued.Limiter.window("w", 1, huge), "seconds"),
            (lambda: queued.Limiter.leaky("l", 1, huge), "seconds")):
        with pytest.raises(ValueError, match=rf"{what} is a number of seconds .* at most "
                                             r"315360000"):
            make()
    with pytest.raises(ValueError, match="reschedule is a whole number >= 0 and at most 10000"):
        queued.Limiter.bucket("b", 1, "second", reschedule=10**400)
    queued.Limiter.concurrent("c", 1, lock_timeout=315360000, wait_timeout=315360000)


def test_backoff_is_sidekiq_enterprises_linear_formula():
    rand = random.Random(7)
    expected = random.Random(7)
    for overrated in (1, 2, 20):
        assert lim.backoff(overrated, rand) == 300 * overrated + expected.randrange(300) + 1


# --- parked jobs are never forgotten (red team rt3 #3 and #4) ---------------------------------

class ReleaseBetween:
    """A worker's ends (a real Fetcher) that release the limiter's unit right after the first
    of the two writes of an over-limit job (its schedule entry, its parking), whichever the
    worker makes first: the worst moment for a release."""

    def __init__(self, fetcher, release):
        self.fetcher, self.release = fetcher, release
        self.calls = []

    def _between(self):
        if self.release is not None:
            self.release()
            self.release = None

    def run_script(self, script, keys, args):
        reply = self.fetcher.run_script(script, keys, args)
        self.calls.append("park")
        self._between()
        return reply

    def send_ahead(self, script, keys, args, keep):
        self.fetcher.send_ahead(script, keys, args, keep)

    def record(self, res, kind, score, data, queue="", task=None):
        self.fetcher.fail(res, kind, score, data, queue, task)
        self.calls.append(kind)
        self._between()


def test_a_release_between_an_overlimit_jobs_two_writes_still_wakes_it(
        default_client, r, make_fetcher):
    from queued.server.guards import Guards
    # Given a concurrent limiter of 1, held, and a job reserved by a worker that got OverLimit
    limiter = queued.Limiter.concurrent("c-between", 1, wait_timeout=0, lock_timeout=60)
    limiter.acquire()
    f = make_fetcher()
    r.lpush("queue:default", b'{"class":"X","args":[1],"jid":"' + b"c" * 24 + b'"}')
    (res,) = f.reserve(1)
    with pytest.raises(queued.OverLimit) as over:
        queued.Limiter.concurrent("c-between", 1, wait_timeout=0).acquire()
    # When the holder releases between the worker's two writes
    ends = ReleaseBetween(f, limiter.release)
    guards = Guards(K, ends, ends.record)
    assert guards.overlimit(res, {"class": "X", "args": [1], "jid": "c" * 24}, over.value,
                            None)
    # Then the job is due now (before: parked first, the release found no schedule entry
    # to bring forward, and the job slept until its cap, 301 s or more, the limiter idle)
    ((member, at),) = r.zrange(K.schedule, 0, -1, withscores=True)
    assert b'"overrated":1' in member
    assert at - time.time() < 1
    assert ends.calls == ["later", "park"]
    assert r.zcard(K.limiter("c-between", "leases")) == 0
    assert r.zcard(K.reserved("host:1:abc", 0)) == 0


def test_parked_jobs_wake_at_their_holders_lease_ends_and_each_takes_back_one_unit(
        default_client, r):
    # Given a concurrent limiter of 2 whose holders crashed (their leases end at +30 and +40)
    clock = Clock(3_000_000)
    limiter = queued.Limiter.concurrent("c-lease", 2, wait_timeout=0, lock_timeout=30)
    limiter.clock = clock
    limiter.acquire()
    clock.t += 10
    limiter.acquire()
    limiter._held.set(())  # (their tokens forgotten: the processes are gone)
    # When three jobs are parked on it, each in the schedule at its cap first (the worker's
    # order)
    wakes = []
    for i in range(3):
        payload = f"parked-{i}"
        r.zadd(K.schedule, {payload: clock.t + 5000})
        ks, args = limiter.park_call(K, payload, 1, None, random.Random(i), cap=5000)
        wakes.append(float(lim.PARK(r, ks, args)) - 3_000_000)
    # Then the first wakes when the first lease ends, the second with the second, and the
    # third (no lease left for it) waits for a release, at the latest until its cap
    scores = {m.decode(): s - 3_000_000 for m, s in r.zrange(K.schedule, 0, -1,
                                                             withscores=True)}
    assert 30.01 <= scores["parked-0"] == wakes[0] < 30.01 + lim.WAKE_JITTER
    assert 40.01 <= scores["parked-1"] == wakes[1] < 40.01 + lim.WAKE_JITTER
    assert scores["parked-2"] == wakes[2] == 5010
    # And the first, run then, takes the expired lease's unit back for itself and wakes no
    # other parked job for it (one unit: one job)
    clock.t = 3_000_000 + scores["parked-0"]
    r.zrem(K.schedule, "parked-0")  # (the scheduler moved it to its queue; it runs)
    limiter.acquire()
    assert r.hget(K.limiter("c-lease"), "reclaimed") == b"1"
    after = {m.decode(): s - 3_000_000 for m, s in r.zrange(K.schedule, 0, -1,
                                                            withscores=True)}
    assert after == {"parked-1": scores["parked-1"], "parked-2": 5010}
    # And a release still wakes the job parked longest that is waiting
    limiter.release()
    assert r.zscore(K.schedule, "parked-1") - clock.t < lim.WAKE_JITTER
    assert r.zscore(K.schedule, "parked-2") - 3_000_000 == 5010
