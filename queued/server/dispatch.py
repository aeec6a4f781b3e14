"""The main thread of a worker of many jobs at once (``threads`` > 1): it reserves jobs for the
lanes that are free and hands each to the pool (pool.py), acks the jobs that ended, and waits.

Fetch stays one pipelined connection with its acks riding in the reserve calls (fetch.py),
owned by this thread alone; the lanes end their jobs through SharedEnds (sharedends.py). It
reserves as many jobs as there are free lanes, and while the lanes finish jobs fast a few more,
held ready for them (ahead.py: a lane whose job ends goes straight on with the next).

While there is nothing to take it does not block on Redis itself: the blocker thread (below)
waits in BLMOVE on its own connection, exactly as a worker of one job does (the landing list,
the master's waker), while this thread waits on ``inbox`` for whichever comes first: a job
that ended (its ack goes out at once), a job that landed, TERM. Reserve calls do not adopt
(reserve.lua): the zset holds the jobs running now. After a reserve whose reply was lost,
the next one adopts once the lanes are empty, which hands over what that call took.

Jobs that must run alone (a class with ``threads: False``, or a suspect of a crash with many
jobs in flight: recovery.py) wait until every lane is free; nothing else starts meanwhile,
and one of them runs in this thread under SIGALRM (an async one on the loop, alone). TERM,
quiet, a rolling restart and recycling stop the reserving and wait for every lane.

Does not own the process's setup and signals (worker.py), the lanes (pool.py), the jobs held
ahead (ahead.py), nor one job (runner.py).
"""
from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time

import redis

from .. import client, events, safepoints
from . import log as logsetup
from . import recovery
from .fetch import Fetcher
from .pool import Pool
from .ahead import Ahead
from .runner import ASYNC, NO_TITLE, SOLO, Lane, Runner
from .outcomes import BACKOFF_MAX, BACKOFF_START, LOG_INTERVAL
from .sharedends import SharedEnds
from .slots import Watch
from .timeout import job_timeout
from .watchdog import Watchdog

log = logging.getLogger("queued.worker")

#: Longest the dispatcher waits without looking around (ticks its record, notices a dead
#: parent) (seconds).
TICK = 1.0
#: How long a job that must run alone (a suspect) waits while fresh jobs still start beside
#: the running ones; then nothing more starts until the lanes are free and it has run
#: (seconds).
SOLO_PATIENCE = 1.0


class Dispatcher:
    def __init__(self, worker, fetcher: Fetcher, recorder):
        w = self.w = worker
        cfg = w.config
        self.fetcher = fetcher
        self.inbox: queue.SimpleQueue = w.inbox
        self.ends = SharedEnds(cfg.redis_url, w.keys, w.identity, w.slot,
                               cfg.dead_timeout_in_seconds, cfg.dead_max_jobs)
        # job code reaches these clients (say(), touch(), get_redis()): a command of theirs is
        # never cut by a JobTimeout (a connection taken from the pool and not given back)
        safepoints.guard_client(self.ends.r)
        safepoints.guard_client(client.get_redis())
        # the master's own record of this worker (record 0): only this thread writes it
        self.header = Lane(0, w.writer, NO_TITLE, job_timeout)
        self.runner = Runner(cfg, w.keys, w.identity, w.slot, self.ends, self.header, w.notes,
                             w.joblog, self._lane_outage, lambda: w.stopping, recorder,
                             offload_ends=True)
        self.watchdog = Watchdog(w.slot, None, cfg.timeout_grace)
        self.pool = Pool(w.threads, self.runner, w.table, w.slot, os.getpid(), self.inbox,
                         self.watchdog.armed)
        self.watchdog.pool = self.pool
        self.pool.stopping = lambda: w.stopping
        self.blocker = Blocker(self._blocking_fetcher(), w, self.inbox)
        self.landing = fetcher.block_queue  # the queue the blocker last waited on
        self.solos: list = []   # (res, msg) reserved, to run alone once the lanes are free
        self.solo_since = 0.0   # when the first of them was reserved (monotonic)
        self.solo_drain = False  # take nothing more until it has run (see _must_wait)
        self.recycler = w.recycler
        self.ahead = Ahead(self.pool, self.runner, w.recycler, cfg.prefetch, w.slot,
                           self._requeue)
        self.alone: int | None = None  # the lane of a job running alone
        self._main_ready = False

    def _blocking_fetcher(self) -> Fetcher:
        cfg, w = self.w.config, self.w
        return Fetcher(cfg.redis_url, w.keys, w.identity, w.slot, w.queues, w.weighted,
                       w.strict, cfg.fetch_timeout, cfg.dead_timeout_in_seconds,
                       cfg.dead_max_jobs)

    # --- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        self.watchdog.start()
        self.blocker.start()
        backoff = BACKOFF_START
        while not (self.w.stopping and not self.pool.busy):
            try:
                self._cycle()
                backoff = BACKOFF_START
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                self.fetcher.reset_connection()
                self._outage(e, backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            except redis.ResponseError as e:
                self._outage(e, backoff, "Redis refused a fetch")
                backoff = min(backoff * 2, BACKOFF_MAX)
            self.w.housekeeping()
            self._show()
        self._final_flush()

    def _cycle(self) -> None:
        self._collect()
        self.runner.write_held()
        self.ends.run_again()
        self._tick()
        if self.w.stopping or self._must_wait():
            self.pool.taking = False
            self.ahead.put_back()
            self._flush()
            self._wait(TICK)
            return
        if self.solos and not self.pool.busy:
            # (the acks of the jobs before go out first, and are applied: a suspect may well
            # kill this process, and they must not run again for it)
            self.pool.taking = False
            self.ahead.put_back()
            self._take_ends()
            self.fetcher.flush()
            self._run_solo(*self.solos.pop(0))
            self.solo_since, self.solo_drain = time.monotonic(), bool(self.solos)
            return
        self.pool.taking = True
        self.ahead.start()
        now = time.monotonic()
        due = self.ahead.due(now)
        want = self.ahead.wanted(now)
        if want <= 0:
            self._flush()
            self._wait(TICK if due is None else due)
            return
        self._take_ends()
        jobs = self.fetcher.reserve(want, self.landing, adopt=not self.pool.busy)
        if self.fetcher.bad_queues or self.fetcher.checked_all:
            self.w._check_queues()
        if not self.fetcher.registered:
            self.w._wait_for_registration()
            return
        if jobs:
            self._start(jobs, now)
            return
        if not self.blocker.blocking and not self.ahead.count():
            # (not while jobs are held: the lanes have work, and a job the blocker landed
            # now would wait here too; one put back (EXTRA_HOLD, TERM) would land at once)
            self.landing = self.blocker.order(self.w._idle_queue())
        self._flush()
        self._wait(TICK)

    def _must_wait(self) -> bool:
        """Reserve nothing now: a job runs alone; or a job waits to run alone until the
        lanes are free, and has waited SOLO_PATIENCE (fresh jobs start until then: rt2
        finding 3, a suspect held three idle lanes for the 15 s of the job beside it) or
        another came meanwhile; or a reserve reply was lost and the next must adopt, which
        needs the lanes empty."""
        if self.alone is not None:
            return True
        if not self.pool.busy:
            return False
        if self.solos:
            return (self.solo_drain
                    or time.monotonic() - self.solo_since >= SOLO_PATIENCE)
        return bool(self.fetcher.lost_reply)

    def _start(self, jobs: list, now: float) -> None:
        """Hand reserved jobs to free lanes, in order; one that must run alone waits for an
        empty pool (one at a time: the others go back to the head of their queue, for another
        process, or for this one once it has run its own); those beyond the free lanes are
        held for the next free ones (ahead.py)."""
        back: list = []
        for res in jobs:
            msg = self.runner.parse(res, self.header)
            if msg is None:
                continue
            kind = self.runner.kind(msg)
            if kind == SOLO:
                if self.solos:
                    back.append((res, msg))
                    continue
                self.solos.append((res, msg))
                self.solo_since = time.monotonic()
            elif not self.pool.free:
                self.ahead.hold(kind, res, msg, now)
            elif kind == ASYNC:
                self.pool.run_async(self.pool.take(), res, msg)
            else:
                self.pool.run_sync(self.pool.take(), res, msg)
        if back:
            self._give_back(back)

    def _give_back(self, back: list) -> None:
        """Jobs that must run alone, beyond the one this process holds, go back to the head
        of their queue (rt2 finding 3: one process took 25 suspects in one fetch and ran them
        one by one, 25 s, while another sat idle and the queue showed none), and this process
        takes nothing more until its own has run (else it would take them again at once).
        Those that could not go back stay here, to run alone in turn."""
        self.solo_drain = True
        e, left = self._requeue({res.member for res, _ in back})
        if e is not None:
            log.warning("worker %d: %d job(s) to run alone could not go back to their queue "
                        "(%s); %d run here, one at a time", self.w.slot, len(back), e, len(left))
            self.solos.extend(item for item in back if item[0].member in left)

    def _requeue(self, going: set) -> tuple[Exception | None, set]:
        """Put the slot's reservations ``going`` back at the head of their queues, keeping the
        rest (running jobs, finished ones whose acks are on the way). On an error, the error
        and the members of ``going`` the slot still holds, read again: the call may have been
        applied with its reply lost, or in part (recovery.Stuck), and one put back and kept
        here too would run twice (RT6). If that read fails too, none is kept: the next
        reserve call adopts whatever stayed once the lanes are empty (``lost_reply``)."""
        cfg, w = self.w.config, self.w
        key = w.keys.reserved(w.identity, w.slot)
        try:
            members = self.ends.r.zrange(key, 0, -1)
            recovery.requeue_slot(self.ends.r, w.keys, w.identity, w.slot, cfg.queue_names,
                                  keep=[m for m in members if m not in going])
            return None, set()
        except (redis.RedisError, OSError, recovery.Stuck) as e:
            err = e
        try:
            return err, set(self.ends.r.zrange(key, 0, -1)) & going
        except (redis.RedisError, OSError):
            self.fetcher.lost_reply = True
            return err, set()

    def _run_solo(self, res, msg) -> None:
        """A job that must run alone, now that every lane is free: in this thread (SIGALRM is
        its time limit), or an async one on the loop; nothing else starts until it ends."""
        lane = self.pool.take()
        self.alone = lane.number
        if self.runner.is_async(msg):
            self.pool.run_async(lane, res, msg)
            return
        self.pool.kinds[lane.number] = SOLO
        if not self._main_ready:  # (this thread runs a job for the first time)
            self._main_ready = True
            events.fire("thread_start")
        logsetup.set_lane(lane.number)
        try:
            self.runner.run(res, msg, Lane(lane.number, lane.writer, NO_TITLE, job_timeout))
        finally:
            logsetup.set_lane(0)
            logsetup.set_context("")
            self.inbox.put(("done", lane.number))

    # --- what comes back -----------------------------------------------------------------------
    def _wait(self, timeout: float) -> None:
        try:
            item = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return
        self._handle(item)
        self._collect()

    def _collect(self) -> None:
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return
            self._handle(item)

    def _handle(self, item: tuple) -> None:
        what = item[0]
        if what in ("done", "next"):  # a job ended ("next": its lane went on with a held one)
            if what == "done":
                self.pool.release(item[1])
                if item[1] == self.alone:
                    self.alone = None
            if len(item) > 2:
                self.ahead.ended(item[2])
            if self.recycler is not None:
                why = self.recycler.after_job(0.0)
                if why and not self.w.stopping:
                    log.info("recycling worker %d: %s; a fresh worker takes its place",
                             self.w.slot, why)
                    self.w.stopping = True
                    self.pool.taking = False
        elif what == "unblocked" and item[2]:
            self.landing = item[1]
            if self.w.stopping:
                # Told to stop while the blocker waited: the job it landed goes back to the
                # head of its queue now, for another worker (a new daemon in a deploy), not
                # when this one has finished its running jobs and exits. (_requeue empties
                # the slot's landing lists, keeping every reservation.)
                self._requeue(set())

    def _take_ends(self) -> None:
        """The acks and task ends the lanes left (sharedends.py), for the next call."""
        self.fetcher.ack_members(self.ends.take_acks())
        self.fetcher.finish_members(self.ends.take_finishes())

    def _flush(self) -> None:
        """Before waiting: the acks of the jobs that ended go out now (no wait for the
        reply), and their done lines."""
        self._take_ends()
        self.fetcher.send_acks()
        self.w.joblog.flush()

    def _final_flush(self) -> None:
        self._take_ends()
        try:
            self.ends.run_again()
        except (redis.RedisError, OSError):
            pass  # still reserved: the master puts those jobs back (at-least-once)
        self.w.joblog.flush()

    # --- the process's record, title, outages ----------------------------------------------------
    def _tick(self) -> None:
        self.w.writer.tick(len(self.solos) + self.ahead.count(), self.watchdog.lag,
                           self.watchdog.blocker)

    def _show(self) -> None:
        self.w.title.count(self.pool.busy, self.pool.size)

    def _outage(self, err: Exception, backoff: float, what: str = "Redis unreachable") -> None:
        if backoff == BACKOFF_START:
            log.error("%s (%s); retrying with backoff", what, err)
        until = time.monotonic() + backoff * (0.5 + random.random())
        while (left := until - time.monotonic()) > 0:
            self._tick()
            self._wait(min(left, TICK))

    def _lane_outage(self, err: Exception, backoff: float) -> None:
        """A job thread could not write its job's end: say so once a minute, back off."""
        if backoff == BACKOFF_START and self.w.notes.due("unregistered", LOG_INTERVAL):
            log.error("Redis unreachable writing a job's end (%s); retrying with backoff", err)
        time.sleep(backoff * (0.5 + random.random()))


class Blocker:
    """A worker's wait for a job while it has nothing to take: BLMOVE on its own connection,
    into the slot's landing list (fetch.py), on the queue the dispatcher orders, in a thread
    of its own, so the dispatcher is free meanwhile. It says it returned (a job landed, the
    block timed out, the master's waker unblocked it) in the dispatcher's inbox."""

    def __init__(self, fetcher: Fetcher, worker, inbox: queue.SimpleQueue):
        self.fetcher = fetcher
        self.w = worker
        self.inbox = inbox
        self.orders: queue.SimpleQueue = queue.SimpleQueue()
        self.blocking = False
        self.thread = threading.Thread(target=self._run, name="queued-blocker", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def order(self, queue_name: str | None) -> str | None:
        """Wait on ``queue_name`` (None: on none, every queue is paused); returns it."""
        self.blocking = True
        self.orders.put(queue_name)
        return queue_name or self.fetcher.block_queue

    def _run(self) -> None:
        w = self.w
        while True:
            queue_name = self.orders.get()
            landed = None
            try:
                w.watch.set_client(w.slot, self.fetcher.connect())
                if queue_name is None:
                    w.watch.set(w.slot, Watch.NO_QUEUE)
                    self.fetcher.wait(after_send=w._announce_idle)
                else:
                    w.watch.set(w.slot, w.queue_index(queue_name))
                    landed = self.fetcher.block(queue_name, after_send=w._announce_idle)
            except redis.ResponseError as e:
                if "WRONGTYPE" in str(e):  # (as Worker._block: wait as long as a block would)
                    w._bad_queue(queue_name)
                time.sleep(self.fetcher.block_seconds)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                self.fetcher.reset_connection()
                time.sleep(BACKOFF_START)  # (the dispatcher's own calls say it, with backoff)
            finally:
                w.watch.set(w.slot, None)
                self.blocking = False
                self.inbox.put(("unblocked", queue_name or self.fetcher.block_queue,
                                landed is not None))
