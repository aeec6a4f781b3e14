"""Jobs a worker of many jobs at once holds ahead of its free lanes (issue 17).

While its lanes finish jobs fast, the dispatcher (dispatch.py) reserves a few jobs beyond its
free lanes: as many as the lanes finish in PREFETCH_WAIT at their pace (lanes / the mean run
time of their last jobs), so a lane whose job ends goes straight on with the next one (pool.py
``ready`` and ``ready_async``) instead of waiting for a round trip to Redis and two thread
hand-offs (0.44 ms median between two 20 ms jobs of a lane; 0.16 ms with jobs held). So a job
never waits here behind others long (issue 16: a worker that held eight jobs behind a
12-second one): slow jobs give none ahead; held ones that wait EXTRA_HOLD (every lane stayed
busy) go back to the head of their queue, and so do they at once when the worker stops taking
jobs (TERM, quiet, recycling, a job to run alone, a lost reserve reply). They are in Redis (the
slot's reserved zset) all along: a kill -9 puts them back unmarked, not as suspects.

Owns the held jobs' count, age and put-back; not the reserve call nor the lanes (dispatch.py,
pool.py).
"""
from __future__ import annotations

import collections
import logging

from .runner import ASYNC

log = logging.getLogger("queued.worker")

#: The longest a job reserved ahead of the free lanes should wait for one, at the pace the lanes
#: finish jobs (seconds): jobs of 20 ms on 25 lanes give 6 ahead, jobs of 200 ms none.
PREFETCH_WAIT = 0.005
#: Jobs held ahead this long while every lane stayed busy go back to the head of their queue,
#: and none are reserved ahead for AHEAD_PAUSE after (seconds).
EXTRA_HOLD = 0.1
AHEAD_PAUSE = 1.0


class Ahead:
    def __init__(self, pool, runner, recycler, prefetch: int, slot: int, requeue):
        self.pool = pool
        self.runner = runner
        self.recycler = recycler
        self.prefetch = prefetch
        self.slot = slot
        self.requeue = requeue  # (members) -> (error or None, members the slot still holds)
        self.took = collections.deque(maxlen=pool.size)  # run times of the last jobs (s)
        self.no_ahead_until = 0.0
        self.stuck = False  # the last try to put them back failed (said once)

    def ended(self, took: float) -> None:
        """A job ran ``took`` seconds (the pace)."""
        self.took.append(took)

    def count(self) -> int:
        """Jobs reserved and not started: held for the next free lanes."""
        return len(self.pool.ready) + len(self.pool.ready_async)

    def wanted(self, now: float) -> int:
        """How many jobs to reserve now: one per free lane, and some ahead while the lanes
        finish jobs fast. Jobs held are topped up once half are gone, so a busy worker asks
        Redis once for several lanes' next jobs, not once per job."""
        ahead, held = self.ahead(now), self.count()
        if not self.pool.free and held > ahead // 2:
            return 0
        return self.pool.free + ahead - held

    def ahead(self, now: float) -> int:
        """As many jobs as the lanes finish in PREFETCH_WAIT at their pace (lanes / the mean
        run time of the last ``threads`` jobs: jobs that started together end together, so
        the gaps between ends said nothing of their length: RT6), at most ``prefetch`` - 1 and
        at most what ``max_jobs`` leaves; none for AHEAD_PAUSE after held jobs went back."""
        if not self.took or now < self.no_ahead_until:
            return 0
        mean = sum(self.took) / len(self.took)
        ahead = min(self.prefetch - 1, int(self.pool.size * PREFETCH_WAIT / max(mean, 1e-6)))
        r = self.recycler
        if r is not None and r.max_jobs is not None:
            ahead = min(ahead, max(0, r.max_jobs - r.jobs - self.pool.busy))
        return ahead

    def hold(self, kind: str, res, msg: dict, now: float) -> None:
        """Keep a parsed job for the next free lane of its kind (a lane whose job of that
        kind ends takes it itself)."""
        (self.pool.ready_async if kind == ASYNC else self.pool.ready).append((res, msg, now))

    def start(self) -> None:
        """The free lanes take the jobs held for them, earliest first of each kind."""
        for held, run in ((self.pool.ready_async, self.pool.run_async),
                          (self.pool.ready, self.pool.run_sync)):
            while self.pool.free:
                try:
                    res, msg, _ = held.popleft()
                except IndexError:
                    break
                run(self.pool.take(), res, msg)

    def due(self, now: float) -> float | None:
        """Seconds until the earliest held job has waited EXTRA_HOLD (None: none held); if
        that is now, they all go back first (and none are held for AHEAD_PAUSE)."""
        times = []
        for held in (self.pool.ready, self.pool.ready_async):
            try:
                times.append(held[0][2])  # (a lane may have taken it meanwhile)
            except IndexError:
                pass
        if not times:
            return None
        if now - min(times) < EXTRA_HOLD:
            return min(times) + EXTRA_HOLD - now
        self.put_back()
        self.no_ahead_until = now + AHEAD_PAUSE
        return None

    def put_back(self) -> None:
        """Every job held goes back to the head of its queue. Those that could not go back
        stay held (and go back with the rest of the slot when this worker exits, if it takes
        nothing more)."""
        back = []
        for held in (self.pool.ready_async, self.pool.ready):
            while True:
                try:
                    back.append(held.popleft())  # (each one a lane did not take)
                except IndexError:
                    break
        if not back:
            return
        e, left = self.requeue({res.member for res, _, _ in back})
        if e is not None:
            if not self.stuck:  # (said once: this is tried again every turn meanwhile)
                log.warning("worker %d: %d job(s) held for the next free lanes could not go "
                            "back to their queue (%s)", self.slot, len(left), e)
            for res, msg, at in back:
                if res.member in left:
                    self.hold(self.runner.kind(msg), res, msg, at)
        self.stuck = e is not None
