"""The master (arbiter): forks the workers and keeps every promise about their jobs.

Its loop is a short list of named steps (STYLE.md principle 2), woken by a signal or a timer:
wait -> handle signals -> reap exited workers (and recover their jobs at once) -> kill workers
past their job timeout + grace -> timers (scheduler, heartbeat + lease + reaper) -> spawn.
Signal handlers only record: Python's wakeup fd writes the signal number into a pipe and the
loop reads it. The master owns every signal: TERM/INT stop, USR1/TSTP quiet, TTIN dumps.

The master never runs a job and never blocks on Redis for long; when Redis is away it keeps
reaping and supervising, and retries Redis work with backoff, logging once per outage.
"""
from __future__ import annotations

import logging
import os
import select
import signal
import sys
import threading
import time
import traceback

import redis

from . import recovery, titles
from . import log as logsetup
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

log = logging.getLogger("queued.master")

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGTSTP, signal.SIGTTIN,
           signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR2)
#: Longest the loop sleeps, so every timer is noticed within it (seconds).
TICK = 1.0
#: Seconds between two workers' stack dumps after TTIN, so they come in slot order.
DUMP_GAP = 0.2
#: Backoff between attempts to reach Redis at boot: first wait (doubling to 5 s).
CONNECT_BACKOFF = 0.1
#: While Redis is unreachable at boot, "still waiting" is logged this long after the first
#: attempt (seconds), then every WAITING_EVERY seconds.
WAITING_REPORTS, WAITING_EVERY = (10.0, 30.0, 60.0), 60.0

RUNNING, QUIET, STOPPING = "running", "quiet", "stopping"


class Master:
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

    # --- signals ---------------------------------------------------------------------------------
    def _install_signals(self) -> None:
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        for sig in SIGNALS:
            signal.signal(sig, lambda signum, frame: None)  # the wakeup fd does the recording

    def _wait(self, timeout: float | None = None) -> None:
        if timeout is None:
            now = time.monotonic()
            timeout = min(TICK, max(0.0, self.next_beat - now))
            # Only the timers that will fire: the scheduler is not ticked unless running, and
            # a deadline passes once. Counting them after that made a quiet or stopping
            # master spin at 100% CPU (a zero timeout for ever).
            if self.state == RUNNING:
                timeout = min(timeout, self.scheduler.due_in(now))
                cron = self.periodic.due_in()  # (wall clock: ticks are times of day)
                if cron is not None:
                    timeout = min(timeout, cron)
            if self.deadline is not None and self.deadline > now:
                timeout = min(timeout, self.deadline - now)
            if self.dumps:
                timeout = min(timeout, max(0.0, self.next_dump - now))
            for due in (self.waker.due_in(now), self.children.next_kill_in(now),
                        self.notify.due_in(now), self.giveback.due_in(now)):
                if due is not None:
                    timeout = min(timeout, due)
        try:
            select.select([self.wake_r, *self.waker.fds()], [], [], timeout)
        except InterruptedError:
            pass

    def _handle_signals(self) -> None:
        try:
            data = os.read(self.wake_r, 512)
        except BlockingIOError:
            return
        for signum in data:
            self._dispatch(signum)

    def _dispatch(self, signum: int) -> None:
        handler = {signal.SIGTERM: self.stop, signal.SIGINT: self.stop,
                   signal.SIGUSR1: self.quiet, signal.SIGTSTP: self.quiet,
                   signal.SIGTTIN: self.dump, signal.SIGHUP: self._hup,
                   signal.SIGUSR2: self.reopen_logs}.get(signum)
        if handler:
            handler(signal.Signals(signum).name)

    def quiet(self, why: str = "TSTP") -> None:
        """Stop fetching, let running jobs finish (workers exit after their job)."""
        if self.state != RUNNING:
            return
        log.info("%s: quiet; running jobs finish, no new jobs are fetched", why)
        self.state = QUIET
        self.rollout.cancel("quiet")
        self.app.fire("quiet")
        self._signal_workers(signal.SIGTERM)
        self._resign()
        self.next_beat = 0.0

    def stop(self, why: str = "TERM") -> None:
        """Graceful stop against one deadline; a second stop request hurries it."""
        if self.state == STOPPING:
            log.info("%s again: stopping now; running jobs go back to their queues", why)
            self.deadline = time.monotonic()
            return
        log.info("%s: shutting down; waiting up to %gs for running jobs", why,
                 self.config.shutdown_timeout)
        self.state = STOPPING
        self.rollout.cancel("stopping")
        self.notify.stopping(self._status())
        self.deadline = time.monotonic() + self.config.shutdown_timeout
        self._signal_workers(signal.SIGTERM)
        self._resign()
        self.next_beat = 0.0

    def _hup(self, why: str) -> None:
        """Rolling restart (rolling.py): the config file and the job code loaded again, then
        every worker replaced, one at a time, each after its job. Refused while quiet or
        stopping: those workers are not replaced anyway."""
        if self.state != RUNNING:
            log.info("%s ignored: this master is %s", why, self.state)
            return
        if self.loading is not None:
            log.info("%s: a reload is under way; the config and code are read again once it "
                     "ends", why)
            self.hup_again = why
            return
        self.loading = self.rollout.start_reload(self.config, why, self.jobmetrics.prepare,
                                                 self._wake)
        if self.loading is not None:
            self._use(self.loading.view)  # (the registries are the loader's until it ends)
            self._reloaded()  # (at once when there is no job code to import)

    def _reloaded(self) -> None:
        """A loop step: once a HUP's new code has loaded (its thread ended), apply the reload,
        unless the master went quiet or is stopping meanwhile."""
        loading = self.loading
        if loading is None or not loading.done:
            return
        self.loading = None
        self._use(LIVE)
        new = self.rollout.finish_reload(loading)
        if new is not None and self.state == RUNNING:
            if loading.change is not None:
                loading.change.commit()
            self._reconfigure(new)
            self.rollout.begin(time.monotonic())
        elif new is not None:
            log.info("%s: the new code loaded, but this master is %s: not applied",
                     loading.why, self.state)
            if loading.change is not None:
                loading.change.abort()
        if self.hup_again is not None:
            why, self.hup_again = self.hup_again, None
            self._hup(why)

    def _use(self, view: AppView) -> None:
        """The registries the loop's parts read: live, or frozen while a HUP's code loads."""
        self.app = view
        self.scheduler.chain = self.periodic.chain = view.client
        self.exits.app = None if view is LIVE else view

    def _wake(self) -> None:
        """From the loader thread: a byte 0 into the wakeup pipe (no signal: a turn)."""
        try:
            os.write(self.wake_w, b"\0")
        except (AttributeError, OSError):
            pass  # (full, or a Master whose loop never ran: it wakes anyway)

    def _reconfigure(self, config) -> None:
        """The settings a HUP may change, in the master's parts (rolling.RESTART_ONLY lists
        the others); workers forked from now on get them from _make_worker."""
        self.config = config
        self.lease_ms = int(config.lease_timeout * 1000)
        for part in (self.heartbeat, self.children):
            part.reconfigure(config)
        self.scheduler.config = self.exits.config = config
        self.periodic = Periodic(self.r, self.keys, config)  # (new schedules; synced at once)
        self.periodic.chain = self.app.client
        self.waker.horizon = config.fetch_timeout
        logging.getLogger("queued").setLevel(config.log_level)
        self.next_beat = 0.0  # a new tag or labels show at once

    def reopen_logs(self, why: str = "USR2") -> None:
        """Reopen ``logfile:`` (logrotate moved it away), here and in every worker."""
        logsetup.reopen()
        log.info("%s: log file reopened; asking the workers to do the same", why)
        self._signal_workers(signal.SIGUSR2)

    def dump(self, why: str = "TTIN") -> None:
        """Log the master's stack and each worker's job and runtime, then ask each worker for
        its Python stack (one labelled record each, in slot order: one at a time, DUMP_GAP
        apart, so nothing interleaves)."""
        stacks = "\n".join(f"Thread {t.name}:\n" + "".join(
            traceback.format_stack(sys._current_frames()[t.ident])).rstrip()
            for t in threading.enumerate() if t.ident in sys._current_frames())
        log.info("TTIN master pid=%d (%s); stack:\n%s", os.getpid(), why, stacks)
        for rec in sorted(self.workers.values(), key=lambda w: w.slot):
            busy = [v for v in self.table.slot_views(rec.slot) if v.busy]
            for v in busy:
                log.info("TTIN worker %d%s pid=%d running %s jid=%s queue=%s for %.1fs",
                         rec.slot, f" lane {v.record}" if v.record else "", rec.pid,
                         v.job_class, v.jid, v.queue, time.monotonic() - v.started)
            if not busy:
                log.info("TTIN worker %d pid=%d idle", rec.slot, rec.pid)
            if rec.pid not in self.dumps:
                self.dumps.append(rec.pid)

    def _resign(self) -> None:
        try:
            self.scheduler.resign()
        except (redis.RedisError, OSError):
            pass

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

    # --- timers ------------------------------------------------------------------------------
    def _timers(self) -> None:
        now = time.monotonic()
        self.notify.tick(now)
        if self.dumps and now >= self.next_dump:
            pid = self.dumps.pop(0)
            if pid in self.workers:
                self.children.kill(pid, signal.SIGTTIN)
                self.next_dump = now + DUMP_GAP
        if self.state == RUNNING:
            try:
                self.periodic.tick()
            except (redis.RedisError, OSError) as e:  # see _redis_error
                self._redis_error("push periodic jobs", e)
                self.periodic.backoff()
            try:
                self.scheduler.tick(now)
            except (redis.RedisError, OSError) as e:  # see _redis_error
                self._redis_error("poll the schedule", e)
                self.scheduler.next_poll = now + 1.0
        if now >= self.next_beat:
            self.next_beat = now + self.config.heartbeat_interval
            self._beat()

    def _show_title(self, state: str | None = None) -> None:
        """The master's process title, from the slot table: on every turn of the loop (it
        lagged the workers by up to a heartbeat), set only when its text changes; systemd's
        STATUS= says the same."""
        busy = self.table.busy_count()
        if state is None:
            state = self._state_text()
        text = titles.master_title(self.config.tag, busy, self.config.jobs_at_once, state)
        if text != self.shown_title:
            self.shown_title = text
            titles.set_title(text)
            self.notify.status(self._status(busy, state))

    def _status(self, busy: int | None = None, state: str | None = None) -> str:
        if busy is None:
            busy = self.table.busy_count()
        if state is None:
            state = self._state_text()
        return titles.master_status(busy, self.config.jobs_at_once, state)

    def _state_text(self) -> str:
        if self.state == RUNNING:
            return self.rollout.progress()
        return {QUIET: "quiet", STOPPING: "stopping"}[self.state]

    def _announce_ready(self) -> None:
        """READY=1 for systemd once every worker is up (has written its record), once."""
        if not self.notify.ready_sent and self.state == RUNNING and self.children.up():
            self.notify.ready(self._status())

    def _beat(self) -> None:
        views = self.table.views()
        try:
            remote = self.heartbeat.beat(views, self.state != RUNNING, self.lease_ms,
                                         list(self.workers))
            if self.heartbeat.lapse:  # frozen or cut off past the lease (heartbeat._lapse)
                log.warning("%s", self.heartbeat.lapse)
            if self.state == RUNNING:
                self.scheduler.elect()
            self._reap_expired()
            self.exits.write_held()
            self.jobmetrics.flush()
        except (redis.RedisError, OSError) as e:  # see _redis_error
            self._redis_error("heartbeat", e)
            return
        log.debug("heartbeat: %d of %d busy; lease renewed for %gs%s",
                  sum(1 for v in views if v.busy), self.config.jobs_at_once,
                  self.config.lease_timeout, "; scheduler leader" if self.scheduler.leader else "")
        if self.redis_down_since is not None:
            log.info("Redis is back after %.1fs", time.monotonic() - self.redis_down_since)
            self.redis_down_since = None
        self.app.fire("heartbeat")
        if remote:
            log.info("remote signal %s received", remote)
            {"TSTP": self.quiet, "USR1": self.quiet, "TERM": self.stop,
             "TTIN": self.dump}.get(remote, lambda why: None)(f"remote {remote}")

    def _reap_expired(self) -> None:
        for identity, moved in recovery.reap_expired(self.r, self.keys):
            log.warning("master %s stopped renewing its lease; %d of its job(s) put back in "
                        "their queues", identity, moved)

    def _redis_error(self, what: str, err: Exception) -> None:
        """Redis unreachable, or refusing commands (NOREPLICAS, MISCONF when its disk is
        full, READONLY after a failover, OOM): the master's Redis steps retry, logged once.
        A refusal used to escape the loop and end the master (tests/faults)."""
        if self.redis_down_since is None:
            self.redis_down_since = time.monotonic()
            what_happened = ("Redis unreachable" if isinstance(
                err, (redis.ConnectionError, redis.TimeoutError, OSError))
                else "Redis refused a command")
            log.error("%s (%s: %s); retrying with backoff", what_happened, what, err)
