"""The master (arbiter): forks the workers and keeps every promise about their jobs.

Its loop is a short list of named steps (STYLE.md principle 2), woken by a signal or a timer:
wait -> handle signals -> reap exited workers (and recover their jobs at once) -> kill workers
past their job timeout + grace -> timers (scheduler, heartbeat + lease + reaper) -> spawn.
Signal handlers only record: Python's wakeup fd writes the signal number into a pipe and the
loop reads it. The master owns every signal: TERM/INT stop, USR1/TSTP quiet, TTIN dumps.

The master never runs a job and never blocks on Redis for long; when Redis is away it keeps
reaping and supervising, and retries Redis work with backoff, logging once per outage.

This module owns the loop, the boot (waiting for Redis) and the end, and the steps about the
workers, each handed to its part (children.py, exits.py, giveback.py, rolling.py). Master is
one object made of four classes, one module each: the signals and what they ask
(mastersignals.py), a HUP's reload (masterreload.py), the timers, the wait and the title
(mastertimers.py); the state they share is made here, in ``__init__``.
"""
from __future__ import annotations

import logging
import os
import signal
import time

import redis

from . import recovery, titles
from ..connection import make_redis
from ..errors import EXIT_REDIS_ERROR
from .heartbeat import Heartbeat, new_identity
from .jobmetrics import JobMetrics
from .loader import LIVE, AppView
from .periodic import Periodic
from ..keys import Keys
from .notify import Notifier
from .scheduler import Scheduler
from .slots import Notes, SlotTable, Watch, slot_count
from .waker import Waker
from .children import Children
from .exits import Exits
from .giveback import GiveBack
from .rolling import Rollout
from ..groups import shape_lines
from .worker import Worker, note_labels
from .masterreload import MasterReload
from .mastersignals import RUNNING, SIGNALS, STOPPING, MasterSignals
from .mastertimers import MasterTimers

log = logging.getLogger("queued.master")

#: Backoff between attempts to reach Redis at boot: first wait (doubling to 5 s).
CONNECT_BACKOFF = 0.1
#: While Redis is unreachable at boot, "still waiting" is logged this long after the first
#: attempt (seconds), then every WAITING_EVERY seconds.
WAITING_REPORTS, WAITING_EVERY = (10.0, 30.0, 60.0), 60.0


class Master(MasterSignals, MasterReload, MasterTimers):
    def __init__(self, config, early_signals: list[int] | None = None, embedded=None,
                 notifier: Notifier | None = None, code=None, reread=None):
        self.config = config
        #: systemd's notify socket (cli.main takes it from the environment); inert outside it
        self.notify = notifier if notifier is not None else Notifier()
        #: Signals that arrived before run() installed the handlers (cli.main records them).
        self.early_signals = early_signals if early_signals is not None else []
        self.embedded = embedded  # the EmbeddedRedis the master runs (embedded_redis:), if any
        self.keys = Keys(config.namespace)
        self.identity = new_identity()
        self.started_at = time.time()
        self.slots = slot_count(config.process_count)  # a spare for rolling restarts
        self.table = SlotTable(self.slots, config.max_threads)
        # so workers log a broken queue once; the master's own persistent conditions too
        self.notes = Notes([*note_labels(config), "held",
                            *(("stuck", slot) for slot in range(self.slots))])
        self.watch = Watch(self.slots)  # which queue each idle worker waits on
        self.giveback = GiveBack(self.slots)  # jobs held behind a slow one (giveback.py)
        self.state = RUNNING
        self.deadline = None
        self.next_beat = 0.0
        self.redis_down_since = None
        self.dumps: list[int] = []   # workers still to be asked for their stack (TTIN)
        self.next_dump = 0.0
        self.r = make_redis(config.redis_url, socket_timeout=5.0, name="queued-master")
        self.heartbeat = Heartbeat(self.r, self.keys, self.identity, config, self.started_at)
        self.scheduler = Scheduler(self.r, self.keys, self.identity, config)
        self.periodic = Periodic(self.r, self.keys, config)
        self.waker = Waker(self.r, self.keys, config.queue_names, self.watch,
                           config.fetch_timeout, serves=lambda slot, q: self.children.serves(
                               slot, q))
        self.lease_ms = int(config.lease_timeout * 1000)
        self.jobmetrics = JobMetrics(config, self.r, self.keys, self.table)  # before any fork
        self.children = Children(config, self.table, self.watch, self._make_worker,
                                 self._in_child, SIGNALS)
        self.exits = Exits(self.r, self.keys, self.identity, config, self.table, self.notes,
                           self._redis_error, self.jobmetrics.count_failure, self.watch)
        # HUP: the job code (appcode.AppCode, from cli) and the config file, read again
        self.rollout = Rollout(self.children, code, reread or (lambda: self.config))
        self.loading = None      # a HUP's new code loading in a thread (loader.py)
        self.hup_again = None    # a HUP that came during it: reloads again once it ends
        self.app: AppView = LIVE  # the job code's registries as the loop reads them
        self.shown_title = ""
        self.waiting_since: float | None = None  # Redis unreachable at boot since (monotonic)

    # --- lifecycle ------------------------------------------------------------------------------
    def run(self) -> int:
        self._install_signals()
        for signum in self.early_signals:  # a TERM during boot still stops us, cleanly
            self._dispatch(signum)
        log.info("queued %s starting: identity=%s concurrency=%d queues=%s%s", titles.__version__,
                 self.identity, self.config.concurrency, ",".join(self.config.queue_names),
                 "" if self.config.strict else " (weighted)")
        for line in shape_lines(self.config):
            log.info("%s", line)
        self.jobmetrics.start()  # /metrics answers even while Redis is away
        if not self._connect():
            self.jobmetrics.stop()
            return 0
        self.app.fire("startup")
        try:
            while not self._stopped():
                self._wait()
                self._handle_signals()
                self._reloaded()
                self.waker.step(wake=self.state == RUNNING)
                self._reap()
                self._mind_embedded()
                self.exits.retry()
                self._murder()
                self._give_back()
                self._timers()
                self._roll()
                self._spawn()
                self._show_title()
                self._announce_ready()
        finally:
            self._finish()
        log.info("bye")
        # Jobs left reserved (Redis was away at the deadline) are another master's to put back
        # once the lease expires; the status tells a supervisor this stop was not clean.
        return EXIT_REDIS_ERROR if self.exits.unrecovered else 0

    def _connect(self) -> bool:
        """Wait for Redis (saying so at growing intervals, and in the title), register, take
        the first lease. False if told to stop while waiting."""
        delay = CONNECT_BACKOFF
        reports = list(WAITING_REPORTS)
        while True:
            try:
                self.r.ping()
                recovery.register(self.r, self.keys, self.identity, self.slots,
                                  self.config.queue_names, self.lease_ms)
                self._reap_expired()
                if self.redis_down_since is not None:
                    log.info("Redis is back after %.1fs", time.monotonic() - self.redis_down_since)
                    self.redis_down_since = None
                self.waiting_since = None
                return True
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                self._redis_error("connect", e)
                self._still_waiting(e, reports)
            if not self._pause(delay):
                return False
            delay = min(delay * 2, 5.0)

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` while handling signals and pinging systemd's watchdog (the loop
        is alive, only Redis is not: a restart would not help). False if told to stop."""
        until = time.monotonic() + seconds
        while (now := time.monotonic()) < until:
            due = self.notify.due_in(now)
            self._wait(until - now if due is None else min(until - now, due))
            self.notify.tick()
            self._handle_signals()
            if self.state == STOPPING:
                return False
        return True

    def _still_waiting(self, err: Exception, reports: list[float]) -> None:
        """Redis unreachable at boot: the title says so, and the log again after 10 s, 30 s,
        then every minute (one line at the first failure said it, then nothing for ever)."""
        now = time.monotonic()
        if self.waiting_since is None:
            self.waiting_since = now
        self._show_title("waiting for Redis")
        waited = now - self.waiting_since
        if waited >= reports[0]:
            log.error("still waiting for Redis after %.0fs (%s)", waited, err)
            if len(reports) > 1:
                reports.pop(0)
            else:
                reports[0] += WAITING_EVERY

    def _stopped(self) -> bool:
        """Stopping, no worker left, and their jobs put back. If Redis is away at the
        deadline the jobs cannot be put back: stop anyway (waiting hung the master for as
        long as Redis was away); they stay reserved under this master's registration, and
        any master recovers them once its lease expires."""
        if self.state != STOPPING or self.workers:
            return False
        if self.exits.unrecovered and time.monotonic() < (self.deadline or 0.0):
            return False
        if self.exits.unrecovered:
            log.warning("Redis unreachable: the jobs of %d worker slot(s) stay reserved; any "
                        "master puts them back once this one's lease expires (%gs)",
                        len(self.exits.unrecovered), self.config.lease_timeout)
        return True

    def _finish(self) -> None:
        if self.loading is not None:  # (stopped while a HUP's code loaded: not applied)
            if self.loading.change is not None:
                self.loading.change.abort()
            self.loading = None
            self._use(LIVE)
        self.app.fire("shutdown")
        views = self.table.views()
        steps = [lambda: self.heartbeat.clear(views), self.jobmetrics.flush,
                 self.scheduler.resign]
        # The registration must stay while this master's slots may hold jobs (a worker still
        # alive because the loop ended on an error, a slot not put back, a failure not
        # written): it is how another master finds them once the lease expires.
        if not (self.exits.unrecovered or self.exits.held or self.workers):
            steps.append(lambda: recovery.unregister(self.r, self.keys, self.identity))
        for step in steps:
            try:
                step()
            except (redis.RedisError, OSError) as e:
                log.warning("could not clear this process's record at exit: %s", e)
        self.waker.close()
        self.jobmetrics.stop()
        titles.set_title(titles.master_title(self.config.tag, 0, self.config.jobs_at_once,
                                             "stopped"))

    # --- workers -----------------------------------------------------------------------------
    @property
    def workers(self) -> dict:
        return self.children.workers

    def _signal_workers(self, sig: int) -> None:
        self.children.signal_all(sig)

    def _make_worker(self, slot: int, group: int = 0) -> Worker:
        self.giveback.clear(slot)
        return Worker(self.config, self.keys, self.identity, slot, self.table, os.getpid(),
                      self.notes, self.watch, self.waker.idle_w,
                      metrics=self.jobmetrics.worker_table, giveback=self.giveback,
                      group=self.config.worker_groups[group])

    def _in_child(self) -> None:
        """In a freshly forked worker: forget the master's plumbing."""
        signal.set_wakeup_fd(-1)
        self.notify.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        os.close(self.waker.idle_r)
        self.jobmetrics.in_child()

    def _spawn(self) -> None:
        # (no fork while a HUP's loader thread lives: loader.py)
        if self.state == RUNNING and self.loading is None:
            self.children.spawn(self.exits.unrecovered)

    def _roll(self) -> None:
        if self.state == RUNNING and self.rollout.active and self.loading is None:
            self.rollout.step(time.monotonic(), self.config.shutdown_timeout)

    def _reap(self) -> None:
        for ended in self.children.reap(self._other_exited):
            self.exits.add(ended)

    def _murder(self) -> None:
        self.children.murder(self.deadline is not None and time.monotonic() >= self.deadline)

    def _give_back(self) -> None:
        """Jobs a worker holds behind one that runs long go back to their queue (giveback.py)."""
        pids = {rec.slot: rec.pid for rec in self.workers.values()}
        try:
            self.giveback.step(self.r, self.keys, self.identity, self.config, self.table, pids)
        except recovery.Stuck as e:
            log.error("%s", e)
        except (redis.RedisError, OSError) as e:
            self._redis_error("give back held jobs", e)

    def _other_exited(self, pid: int, status: int) -> None:
        """A child that is not a worker: the embedded redis-server, or one the job code
        started and orphaned to us."""
        if self.embedded is not None:
            self.embedded.reaped(pid, status)

    def _mind_embedded(self) -> None:
        if self.embedded is not None:
            self.embedded.restart_if_dead()
