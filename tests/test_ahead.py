"""How many jobs a worker of many jobs at once holds ready ahead of its lanes (ahead.py
``Ahead.ahead``): as many as its lanes finish in PREFETCH_WAIT at the pace their recent
run times give, within prefetch and max_jobs. Pure arithmetic on the dispatcher's state."""
from __future__ import annotations

import collections
from types import SimpleNamespace

from queued.server.ahead import PREFETCH_WAIT, Ahead


def ahead(lanes, took, prefetch=8, busy=None, recycler=None, now=100.0, paused_until=0.0):
    state = SimpleNamespace(
        took=collections.deque(took, maxlen=lanes), no_ahead_until=paused_until,
        pool=SimpleNamespace(size=lanes, busy=lanes if busy is None else busy),
        prefetch=prefetch, recycler=recycler)
    return Ahead.ahead(state, now)


def test_jobs_of_20_ms_on_25_lanes_hold_six():
    assert PREFETCH_WAIT == 0.005
    assert ahead(25, [0.020] * 25) == 6  # 25 lanes / 20 ms = 1,250 a second: 6.25 in 5 ms


def test_slow_jobs_hold_none_even_when_they_ended_together():
    # (RT6: 8 jobs of 2 s that started together ended within 3 ms; the gaps between their ends
    # gave a pace of 2,300 a second and 7 held for 100 ms)
    assert ahead(8, [2.0] * 8) == 0
    assert ahead(8, [0.2] * 8) == 0
    assert ahead(25, [0.2] * 25) == 0


def test_the_pace_is_the_mean_of_the_jobs_seen_not_the_last_nor_the_slowest():
    # 24 jobs of 1 ms and one of 200 ms on 25 lanes: a mean of 8.96 ms, 13.95 in 5 ms, so 13
    # (the slowest gives 0, the last 0, the fastest or the median 125; rounding 14)
    assert ahead(25, [0.001] * 24 + [0.2], prefetch=100) == 13
    assert ahead(25, [0.2] + [0.001] * 24, prefetch=100) == 13
    # Before as many jobs as lanes ended, the mean is of those that did: one of 10 ms on 25
    # lanes, 12.5 in 5 ms (a mean over every lane would give 312, so prefetch - 1)
    assert ahead(25, [0.010], prefetch=100) == 12


def test_prefetch_bounds_it_and_one_means_none():
    assert ahead(25, [0.001] * 25) == 7       # 125 in 5 ms, at most prefetch - 1
    assert ahead(25, [0.001] * 25, prefetch=1) == 0


def test_max_jobs_leaves_room_only_for_what_it_still_allows():
    recycler = SimpleNamespace(max_jobs=100, jobs=90)
    assert ahead(4, [0.001] * 4, busy=4, recycler=recycler) == 6   # 100 - 90 - 4 running
    recycler.jobs = 97
    assert ahead(4, [0.001] * 4, busy=4, recycler=recycler) == 0
    assert ahead(4, [0.001] * 4, recycler=SimpleNamespace(max_jobs=None, jobs=10**6)) == 7


def test_none_before_any_job_ended_nor_while_paused_after_a_put_back():
    assert ahead(25, []) == 0
    assert ahead(25, [0.001] * 25, now=100.0, paused_until=100.5) == 0
    assert ahead(25, [0.001] * 25, now=100.5, paused_until=100.5) == 7


def test_a_lane_goes_on_with_a_held_job_only_while_the_dispatcher_lets_it_and_not_stopping():
    from queued.server.pool import Pool
    stopping = [False]
    state = SimpleNamespace(taking=True, stopping=lambda: stopping[0],
                            ready=collections.deque([("res1", {"jid": "1"}, 1.0),
                                                     ("res2", {"jid": "2"}, 2.0)]))
    assert Pool._next_ready(state) == ("res1", {"jid": "1"})   # earliest first
    stopping[0] = True   # (TERM: seen by the lanes before the dispatcher's next turn)
    assert Pool._next_ready(state) is None
    stopping[0], state.taking = False, False   # (a job runs alone, a lost reply, quiet)
    assert Pool._next_ready(state) is None
    state.taking = True
    assert Pool._next_ready(state) == ("res2", {"jid": "2"})
    assert Pool._next_ready(state) is None and not state.ready
    # An async lane takes from the deque it names (the async jobs held), not the sync one
    state.ready.append(("res3", {"jid": "3"}, 3.0))
    held_async = collections.deque([("res4", {"jid": "4"}, 4.0)])
    assert Pool._next_ready(state, held_async) == ("res4", {"jid": "4"})
    assert not held_async and len(state.ready) == 1
