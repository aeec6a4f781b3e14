"""A worker process: reserve jobs, run each (runner.py), block in Redis while idle.

With ``threads: 1`` (the default) one job at a time, in the main thread, under SIGALRM, as
below. With ``threads`` > 1 the main thread is a dispatcher (dispatch.py) handing jobs to the
process's job threads and event loop (pool.py); this module keeps the process's setup for
both, and workersignals.py its signals (TERM: finish the jobs in hand, then exit 0; TTIN: its
stacks to the log; USR2: reopen the log file). The worker tells its master what it is doing
through the shared slot table, never through Redis.

Whatever the worker holds when it exits, for any reason, is put back by the master.
"""
from __future__ import annotations

import logging
import os
import queue
import random
import time

import redis

from . import log as logsetup
from .. import client, events
from ..groups import Group
from . import titles
from .fetch import Fetcher
from .reserved import Reservation
from .recycle import Recycler
from .outcomes import BACKOFF_MAX, BACKOFF_START, LOG_INTERVAL
from .runner import Runner, single_lane
from .slots import Notes, SlotWriter, Watch
from .workersignals import WorkerSignals, _Wake

log = logging.getLogger("queued.worker")

#: Seconds a batch's jobs may take together: a batch doubles (up to ``prefetch``: 32 by
#: default) while the next one would run within this, and stays as it is while this one did.
#: So a job of a higher queue, or the next in line, waits for at most ~10 ms of the batch
#: before it (RT8: with a batch growing while jobs averaged under 5 ms, 32 of them held a
#: strict queue's job for 160 ms), and the master takes back what waits behind a job that
#: turns slow (giveback.py). 32, not 8: a reserve call per 32 no-op jobs instead of 8 ran
#: 16 % more of them, at 15 % less Redis CPU (issue 18); 1 ms jobs still go 8 at a time.
BATCH_SPAN = 0.01
#: In a batch, before a job starts, the acks of the jobs finished so far go out (one write,
#: no wait), with their done lines, once the last ones went out this many seconds ago: a kill
#: -9 runs again at most the short jobs that finished in the 20 ms before the job it was
#: running started (or before the kill). An ack every 8 jobs instead took back most of what
#: a batch of 32 gains (issue 18).
ACK_AFTER = 0.02
#: Seconds a worker waits before asking again while its master is not registered.
UNREGISTERED_NAP = 0.25


def note_labels(config) -> list:
    """The conditions the workers of one master log once per interval between them."""
    return [*(("queue", q) for q in config.queue_names), ("key", "retry"), ("key", "dead"),
            "unregistered", "rss at start"]


class Worker(WorkerSignals):
    """Built in the master before fork; ``run`` is the child's whole life."""

    def __init__(self, config, keys, identity: str, slot: int, table, master_pid: int,
                 notes: Notes | None = None, watch: Watch | None = None,
                 idle_fd: int | None = None, metrics=None, giveback=None, group=None):
        self.config = config
        self.notes = notes if notes is not None else Notes(note_labels(config))
        self.watch = watch if watch is not None else Watch(config.concurrency)
        self.idle_fd = idle_fd  # a byte written here tells the master we block (waker.py)
        #: The queues this worker serves and how (config.worker_groups: the top level's, or
        #: its queue group's)
        self.group = group if group is not None else Group(
            "", config.queues, config.strict, config.concurrency, config.threads)
        self._preference = _idle_preference(self.group)
        self._index = {name: i for i, name in enumerate(config.queue_names)}
        self.keys = keys
        self.identity = identity
        self.slot = slot
        self.table = table
        self.master_pid = master_pid
        self.stopping = False
        self.blocking = False
        self.reopen_logs = False
        self.batch = 1
        self.metrics = metrics  # the per-class metrics table (metrics.py), or None
        self.giveback = giveback  # the master's take-back of a batch held too long, or None
        self.threads = self.group.threads
        self.queues = self.group.queue_names
        self.weighted = self.group.weighted_queues
        self.strict = self.group.strict
        #: The dispatcher's (threads > 1): what job threads, signals and the blocker tell it
        self.inbox: queue.SimpleQueue | None = None
        self.dispatcher = None

    # --- process setup -----------------------------------------------------------------------
    def run(self) -> None:
        """Never returns: the child leaves through os._exit so nothing of the master's
        (atexit handlers, an embedded Redis) runs twice."""
        code = 0
        try:
            self._init_process()
            if self.dispatcher is not None:
                self.dispatcher.run()
            else:
                self._loop()
        except BaseException:  # noqa: BLE001 - last resort, the master requeues our jobs
            log.exception("worker %d crashed", self.slot)
            code = 1
        finally:
            # (any may not exist yet after a failed boot: an AttributeError, ignored; the
            # joblog's flush on its own for a worker of many jobs at once, whose runner is
            # its dispatcher's)
            for last in (lambda: self.joblog.flush(), lambda: self.runner.flush_ends(),
                         lambda: self.fetcher.close()):
                try:
                    last()
                except Exception:  # noqa: BLE001
                    pass
            logging.shutdown()
        os._exit(code)

    def _init_process(self) -> None:
        self._install_signals()
        random.seed()
        logsetup.retag(f"w{self.slot}")
        threaded = self.threads > 1
        self.joblog = (logsetup.LaneJobLog if threaded else logsetup.JobLog)(log.name)
        self.joblog.bind()
        self.writer = SlotWriter(self.table, self.slot, os.getpid())
        self.writer.tick()  # the record names this pid from now on (the master never writes it)
        if not threaded:  # (many jobs at once share get_redis()'s pool: client.py)
            client.dedicate_job_connection()
        cfg = self.config
        self.fetcher = Fetcher(
            cfg.redis_url, self.keys, self.identity, self.slot, self.queues, self.weighted,
            self.strict, cfg.fetch_timeout, cfg.dead_timeout_in_seconds, cfg.dead_max_jobs)
        self.title = titles.WorkerTitle(cfg.tag, self.slot)
        self.recycler = Recycler.of(cfg)
        recorder = (self.metrics.recorder(self.slot, locked=threaded, held=not threaded)
                    if self.metrics else None)
        if threaded:
            from .dispatch import Dispatcher  # (its threads, loop and watchdog: only here)
            self.inbox = queue.SimpleQueue()
            self.dispatcher = Dispatcher(self, self.fetcher, recorder)
            self.title.count(0, self.threads)
        else:
            self.title.idle()
            self.runner = Runner(cfg, self.keys, self.identity, self.slot, self.fetcher,
                                 single_lane(self.writer, self.title), self.notes, self.joblog,
                                 self._outage, lambda: self.stopping, recorder)
        why = self.recycler and self.recycler.check_start()
        if why and self.notes.due("rss at start", LOG_INTERVAL):
            log.error("worker %d: %s", self.slot, why)
        # The application re-makes what must not cross a fork (events.py), before the first
        # job. A worker of one job at a time runs its jobs in its one thread, so that thread
        # starts here too; a worker of many fires thread_start in each thread that runs jobs
        # (pool.py), and in this one before it first runs a job alone (dispatch.py).
        events.fire("worker_start")
        if not threaded:
            events.fire("thread_start")
        # (again: a hook may have added a handler of its own, which then gets the done lines
        # through logging: RT12)
        self.joblog.bind()
        self.fetcher.before_ends = self.joblog.flush  # (a job's line out before its ack)
        self._announce_idle()  # wakes the master: this worker is up (systemd's READY waits)

    # --- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        backoff = BACKOFF_START
        while not self.stopping:
            try:
                self._cycle()
                backoff = BACKOFF_START
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                self.fetcher.reset_connection()
                self._outage(e, backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            except redis.ResponseError as e:
                # Redis refused the fetch (READONLY after a failover, OOM, MISCONF, BUSY).
                # This used to crash the worker, and each replacement crashed the same way.
                self._outage(e, backoff, "Redis refused a fetch")
                backoff = min(backoff * 2, BACKOFF_MAX)
            except _Wake:
                self.fetcher.reset_connection()
            self.housekeeping()

    def housekeeping(self) -> None:
        """Between two turns of the loop: reopen the log file if asked, stop if orphaned."""
        if self.reopen_logs:
            self.reopen_logs = False
            self.joblog.flush()
            logsetup.reopen()
            self.joblog.bind()
            log.info("log file reopened")
        if os.getppid() != self.master_pid:
            self.stopping = True

    def _outage(self, err: Exception, backoff: float, what: str = "Redis unreachable") -> None:
        self.joblog.flush()
        if backoff == BACKOFF_START:
            log.error("%s (%s); retrying with backoff", what, err)
        self.writer.tick()
        time.sleep(backoff * (0.5 + random.random()))

    def _cycle(self) -> None:
        self.runner.write_held()
        jobs = self.fetcher.reserve(self.batch)
        if jobs:
            log.debug("reserved %d job(s) (batch %d)", len(jobs), self.batch)
        if self.fetcher.bad_queues or self.fetcher.checked_all:
            self._check_queues()
        if not self.fetcher.registered:
            self._wait_for_registration()
            return
        if not jobs:
            self.batch = 1
            self.writer.tick()
            self.title.idle()
            # Not if TERM came while we blocked: the landed job stays in the landing list
            # and the master puts it back when we exit. On a loaded host a quiet worker
            # handled its TERM only after BLMOVE had landed a job pushed after the quiet.
            queue = self._idle_queue()
            log.debug("idle: waiting on %s", f"queue {queue}" if queue else "no queue (paused)")
            landed = self._block(queue)
            if landed is None or self.stopping:
                return
            # Start it at once: the call that reserves it goes out now and its reply is read
            # when the job is done (fetch.py's header says why this is safe).
            self.fetcher.reserve_landed()
            jobs = [Reservation(b"", queue, landed)]
        started = acked = time.monotonic()
        done = 0
        for res in jobs:
            if self.stopping:
                break  # told to stop: start nothing new; the master puts the rest back at the head
            if done and self.giveback is not None and self.giveback.revoked(
                    self.slot, self.writer.started):
                # the job before ran long: the master gave the rest of the batch to idle
                # workers (giveback.py); none of it is ours to run now
                log.debug("the rest of the batch (%d) went back to the queue", len(jobs) - done)
                break
            if done and time.monotonic() - acked >= ACK_AFTER:
                # (after the give-back's look: an ack sent before it, of a job the master
                # judged slow and was taking the rest back behind, left it nothing to move)
                self.fetcher.send_acks()
                self.runner.flush_ends()
                acked = time.monotonic()
            held = len(jobs) - done - 1
            if self.recycler is None:
                self.runner.process(res, held=held)
            else:
                self._process_and_count(res, held)
            done += 1
        self.runner.flush_ends()  # the batch's done lines (one write) and metrics
        self._adapt(len(jobs), done, time.monotonic() - started)

    def _process_and_count(self, res: Reservation, held: int) -> None:
        """Run one job, then leave if it was this worker's last (recycle.py): as after a
        TERM, nothing new is started, and what the batch still holds goes back."""
        began = time.monotonic()
        self.runner.process(res, held=held)
        why = self.recycler.after_job(time.monotonic() - began)
        if why:
            log.info("recycling worker %d: %s; a fresh worker takes its place", self.slot, why)
            self.stopping = True

    def _idle_queue(self) -> str:
        """The queue to wait on: the first (in priority order) that no other idle worker waits
        on, else this slot's own. BLMOVE waits on one list, where Sidekiq's BRPOP waits on all
        of them; sharing the queues out keeps a push to any queue waking a worker at once
        while there are as many idle workers as queues. (For a job on a queue nobody waits on,
        the master wakes one of us: waker.py.)"""
        paused = self.fetcher.paused
        open_ = [q for q in self._preference if q not in paused]
        if not open_:
            return None  # every queue paused: wait on none (Fetcher.wait)
        taken = self.watch.others(self.slot)
        for q in open_:
            if self.queue_index(q) not in taken:
                return q
        return self.fetcher.block_queue if self.fetcher.block_queue not in paused else open_[0]

    def _block(self, queue: str | None) -> bytes | None:
        """Wait for a job on ``queue`` (None: on none, every queue is paused); the payload
        that landed, or None (timed out, or woken by the master for a job on another queue or
        a change of pauses: the next reserve looks at every queue)."""
        self.blocking = True
        try:
            if self.stopping:
                return None
            # The client id first, then the queue: the master wakes us by that id (slots.Watch)
            self.watch.set_client(self.slot, self.fetcher.connect())
            if queue is None:
                self.watch.set(self.slot, Watch.NO_QUEUE)
                self.fetcher.wait(after_send=self._announce_idle)
                return None
            self.watch.set(self.slot, self.queue_index(queue))
            return self.fetcher.block(queue, after_send=self._announce_idle)
        except redis.ResponseError as e:
            # The queue this worker blocks on has a key of the wrong type: BLMOVE fails at
            # once, every time. It used to crash the worker, and each replacement crashed the
            # same way. Wait as long as the block would have (a TERM still wakes us), so the
            # other queues are served by the reserve calls in between, without spinning.
            # (Other refusals go to _loop: logged once, backoff.)
            if "WRONGTYPE" not in str(e):
                raise
            self._bad_queue(queue)
            time.sleep(self.fetcher.block_seconds)
            return None
        finally:
            self.blocking = False
            self.watch.set(self.slot, None)

    def _wait_for_registration(self) -> None:
        """The master's registration is gone (reserve.lua took nothing): its lease expired
        and another master put back what it held. Reserving or blocking now would leave jobs
        where no master can recover them, so wait for the master to register again (its next
        heartbeat does), and say so once for the whole daemon."""
        if self.notes.due("unregistered", LOG_INTERVAL):
            log.warning("this master is not registered (its lease expired: frozen, or cut off "
                        "from Redis?); workers take no job until its next heartbeat "
                        "registers it again")
        self.batch = 1
        self.writer.tick()
        time.sleep(UNREGISTERED_NAP)

    def queue_index(self, name: str) -> int:
        """A queue's index as the master's Watch and waker know it (slots.Watch): its place
        among every queue the daemon serves."""
        return self._index[name]

    def _announce_idle(self) -> None:
        """Tell the master this worker now blocks, or is up (one byte; a full pipe means the
        master has plenty to read already), so a job it saw land on a queue nobody watched
        then can be handed to us (waker.py), and so it sees at once that we started."""
        if self.idle_fd is not None:
            try:
                os.write(self.idle_fd, b"\0")
            except OSError:
                pass

    def _check_queues(self) -> None:
        """Log a queue whose key is not a list (reserve.lua skips it), once a minute for the
        whole daemon; and when a complete check finds it a list again, say so."""
        for name in self.fetcher.bad_queues:
            self._bad_queue(name)
        if self.fetcher.checked_all:
            for name in self.fetcher.queues:
                if name not in self.fetcher.bad_queues and self.notes.clear(("queue", name)):
                    log.info("queue %s: key %s is a list again; serving it", name,
                             self.keys.queue(name))

    def _bad_queue(self, name: str) -> None:
        if self.notes.due(("queue", name), LOG_INTERVAL):
            log.error("queue %s: key %s holds another Redis type, not a list (WRONGTYPE); "
                      "skipping this queue until the key is fixed, serving the others", name,
                      self.keys.queue(name))

    def _adapt(self, got: int, done: int, elapsed: float) -> None:
        if got == self.batch and done == got and elapsed <= BATCH_SPAN:
            if elapsed * 2 <= BATCH_SPAN:
                self.batch = min(self.batch * 2, self.config.prefetch)
        else:
            self.batch = 1


def _idle_preference(group) -> list[str]:
    """A group's queues in the order its idle workers take them to wait on: strict order as
    listed, weighted order by weight (heaviest first, ties as listed)."""
    names = list(group.queue_names)
    if group.strict:
        return names
    weight = dict.fromkeys(names, 0)
    for name, w in group.queues:  # as weighted_queues counts them: max(w, 1) each
        weight[name] += max(w, 1)
    return sorted(names, key=lambda q: -weight[q])
