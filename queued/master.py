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

import faulthandler
import logging
import os
import select
import signal
import sys
import time

import redis

from . import events, recovery, titles
from .connection import make_redis
from .errors import EXIT_REDIS_ERROR, WORKER_BOOT_ERROR, QueuedError
from .heartbeat import Heartbeat, new_identity
from .keys import Keys
from .scheduler import Scheduler
from .slots import Notes, SlotTable, SlotWriter, Watch
from .waker import Waker
from .worker import Worker, note_labels

log = logging.getLogger("queued.master")

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGTSTP, signal.SIGTTIN,
           signal.SIGCHLD, signal.SIGHUP)
#: Longest the loop sleeps, so every timer is noticed within it (seconds).
TICK = 1.0
#: A worker that dies sooner than this after its fork counts as a boot failure (backoff).
BOOT_GRACE = 2.0
#: Respawn backoff after repeated boot failures: first delay, cap (seconds).
SPAWN_BACKOFF, SPAWN_BACKOFF_MAX = 0.1, 30.0
#: Seconds between two workers' stack dumps after TTIN, so their output does not interleave.
DUMP_GAP = 0.2
#: An idle worker that has not ticked for this long beyond its blocking fetch (fetch_timeout)
#: is stuck and is killed (seconds).
SILENT_LIMIT = 60.0
#: A condition that persists (jobs that cannot be put back, failures that cannot be written)
#: is logged at most this often (seconds).
KEY_LOG_INTERVAL = 60.0
#: Seconds between two attempts to start an embedded Redis that died and would not start.
EMBEDDED_RETRY = 5.0

RUNNING, QUIET, STOPPING = "running", "quiet", "stopping"


class WorkerRecord:
    def __init__(self, slot: int, pid: int, processed: int = 0):
        self.slot = slot
        self.pid = pid
        self.spawned = time.monotonic()
        self.processed_at_spawn = processed  # the slot's job count when this worker began
        self.kill_reason: str | None = None   # "timeout", "shutdown", "silent"
        self.timeout_info: tuple[float, str] | None = None


class Master:
    def __init__(self, config, early_signals: list[int] | None = None, embedded=None):
        self.config = config
        #: Signals that arrived before run() installed the handlers (cli.main records them).
        self.early_signals = early_signals if early_signals is not None else []
        self.embedded = embedded  # the EmbeddedRedis the master runs (embedded_redis:), if any
        self.embedded_retry_at = 0.0
        self.keys = Keys(config.namespace)
        self.identity = new_identity()
        self.started_at = time.time()
        self.table = SlotTable(config.concurrency)
        # so workers log a broken queue once; the master's own persistent conditions too
        self.notes = Notes([*note_labels(config), "held",
                            *(("stuck", slot) for slot in range(config.concurrency))])
        self.held: list[recovery.Held] = []  # failures Redis refused to store (retried)
        self.watch = Watch(config.concurrency)  # which queue each idle worker waits on
        self.workers: dict[int, WorkerRecord] = {}       # pid -> record
        self.free: set[int] = set(range(config.concurrency))
        # slot -> (exit status, reason, running jid, its timeout): exited, jobs not yet put back
        self.unrecovered: dict[int, tuple[int, str, str, float]] = {}
        self.boot_failures = [0] * config.concurrency
        self.next_spawn = [0.0] * config.concurrency
        self.state = RUNNING
        self.deadline = None
        self.next_beat = 0.0
        self.redis_down_since = None
        self.dumps: list[int] = []   # workers still to be asked for their stack (TTIN)
        self.next_dump = 0.0
        self.r = make_redis(config.redis_url, socket_timeout=5.0, name="queued-master")
        self.heartbeat = Heartbeat(self.r, self.keys, self.identity, config, self.started_at)
        self.scheduler = Scheduler(self.r, self.keys, self.identity, config)
        self.waker = Waker(self.r, self.keys, config.queue_names, self.watch,
                           config.fetch_timeout)
        self.lease_ms = int(config.lease_timeout * 1000)
        # An idle worker ticks its record before each blocking fetch, which lasts up to
        # fetch_timeout: only silence beyond that is a stuck worker (a fixed 60 s limit killed
        # the idle workers of a daemon with fetch_timeout above 60 s every minute).
        self.silent_limit = SILENT_LIMIT + config.fetch_timeout

    # --- lifecycle ------------------------------------------------------------------------------
    def run(self) -> int:
        self._install_signals()
        for signum in self.early_signals:  # a TERM during boot still stops us, cleanly
            self._dispatch(signum)
        log.info("queued %s starting: identity=%s concurrency=%d queues=%s%s", titles.__version__,
                 self.identity, self.config.concurrency, ",".join(self.config.queue_names),
                 "" if self.config.strict else " (weighted)")
        if not self._connect():
            return 0
        events.fire("startup")
        try:
            while not self._stopped():
                self._wait()
                self._handle_signals()
                self.waker.step(wake=self.state == RUNNING)
                self._reap()
                self._mind_embedded()
                self._recover_pending()
                self._murder()
                self._timers()
                self._spawn()
        finally:
            self._finish()
        log.info("bye")
        # Jobs left reserved (Redis was away at the deadline) are another master's to put back
        # once the lease expires; the status tells a supervisor this stop was not clean.
        return EXIT_REDIS_ERROR if self.unrecovered else 0

    def _connect(self) -> bool:
        """Wait for Redis (logging once), register, take the first lease. False if told to
        stop while waiting."""
        delay = SPAWN_BACKOFF
        while True:
            try:
                self.r.ping()
                recovery.register(self.r, self.keys, self.identity, self.config.concurrency,
                                  self.config.queue_names, self.lease_ms)
                self._reap_expired()
                if self.redis_down_since is not None:
                    log.info("Redis is back after %.1fs", time.monotonic() - self.redis_down_since)
                    self.redis_down_since = None
                return True
            except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
                self._redis_error("connect", e)
            self._wait(delay)
            self._handle_signals()
            if self.state == STOPPING:
                return False
            delay = min(delay * 2, 5.0)

    def _stopped(self) -> bool:
        """Stopping, no worker left, and their jobs put back. If Redis is away at the
        deadline the jobs cannot be put back: stop anyway (waiting hung the master for as
        long as Redis was away); they stay reserved under this master's registration, and
        any master recovers them once its lease expires."""
        if self.state != STOPPING or self.workers:
            return False
        if self.unrecovered and time.monotonic() < (self.deadline or 0.0):
            return False
        if self.unrecovered:
            log.warning("Redis unreachable: the jobs of %d worker slot(s) stay reserved; any "
                        "master puts them back once this one's lease expires (%gs)",
                        len(self.unrecovered), self.config.lease_timeout)
        return True

    def _finish(self) -> None:
        events.fire("shutdown")
        views = self.table.views()
        steps = [lambda: self.heartbeat.clear(views), self.scheduler.resign]
        # The registration must stay while this master's slots may hold jobs (a worker still
        # alive because the loop ended on an error, a slot not put back, a failure not
        # written): it is how another master finds them once the lease expires.
        if not (self.unrecovered or self.held or self.workers):
            steps.append(lambda: recovery.unregister(self.r, self.keys, self.identity))
        for step in steps:
            try:
                step()
            except (redis.RedisError, OSError) as e:
                log.warning("could not clear this process's record at exit: %s", e)
        self.waker.close()
        titles.set_title(titles.master_title(self.config.tag, 0, self.config.concurrency,
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
            if self.deadline is not None and self.deadline > now:
                timeout = min(timeout, self.deadline - now)
            if self.dumps:
                timeout = min(timeout, max(0.0, self.next_dump - now))
            waker = self.waker.due_in(now)
            if waker is not None:
                timeout = min(timeout, waker)
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
                   signal.SIGTTIN: self.dump, signal.SIGHUP: self._hup}.get(signum)
        if handler:
            handler(signal.Signals(signum).name)

    def quiet(self, why: str = "TSTP") -> None:
        """Stop fetching, let running jobs finish (workers exit after their job)."""
        if self.state != RUNNING:
            return
        log.info("%s: quiet; running jobs finish, no new jobs are fetched", why)
        self.state = QUIET
        events.fire("quiet")
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
        self.deadline = time.monotonic() + self.config.shutdown_timeout
        self._signal_workers(signal.SIGTERM)
        self._resign()
        self.next_beat = 0.0

    def _hup(self, why: str) -> None:
        log.info("HUP ignored: queued has no reload; restart it (TERM) to pick up changes")

    def dump(self, why: str = "TTIN") -> None:
        """Log each worker's job and runtime, then ask each for its Python stack.

        The workers are asked one at a time, DUMP_GAP apart (``_timers``): faulthandler writes
        a stack in many small unbuffered writes, and workers dumping at once into the same
        stderr interleaved their stacks line by line, unreadably."""
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        for rec in sorted(self.workers.values(), key=lambda w: w.slot):
            v = self.table.read(rec.slot)
            if v.busy:
                log.info("TTIN worker %d pid=%d running %s jid=%s queue=%s for %.1fs", rec.slot,
                         rec.pid, v.job_class, v.jid, v.queue, time.monotonic() - v.started)
            else:
                log.info("TTIN worker %d pid=%d idle", rec.slot, rec.pid)
            if rec.pid not in self.dumps:
                self.dumps.append(rec.pid)

    def _resign(self) -> None:
        try:
            self.scheduler.resign()
        except (redis.RedisError, OSError):
            pass

    # --- workers -----------------------------------------------------------------------------
    def _signal_workers(self, sig: int) -> None:
        for pid in list(self.workers):
            self._kill(pid, sig)

    @staticmethod
    def _kill(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def _spawn(self) -> None:
        if self.state != RUNNING:
            return
        now = time.monotonic()
        for slot in sorted(self.free):
            if slot not in self.unrecovered and now >= self.next_spawn[slot]:
                self._fork(slot)

    def _fork(self, slot: int) -> None:
        worker = Worker(self.config, self.keys, self.identity, slot, self.table, os.getpid(),
                        self.notes, self.watch, self.waker.idle_w)
        # The record is made ready before the fork and left to the child after it: a reset
        # here after fork() overwrote the record of a child that had already begun a job,
        # hiding it from the timeout kill, the heartbeat and the crash count.
        self.table.reset(slot)
        processed = self.table.read(slot, writer_alive=False).processed
        self.watch.clear(slot)  # its previous worker may have died while blocked
        old = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the child: forget the master's plumbing, then run
                signal.set_wakeup_fd(-1)
                os.close(self.wake_r)
                os.close(self.wake_w)
                os.close(self.waker.idle_r)
                worker.run()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        self.workers[pid] = WorkerRecord(slot, pid, processed)
        self.free.discard(slot)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            rec = self.workers.pop(pid, None)
            if rec is None:
                self._other_exited(pid, status)
                continue
            self.free.add(rec.slot)
            self._exited(rec, status)

    def _other_exited(self, pid: int, status: int) -> None:
        """A child that is not a worker: one the job code started and orphaned to us, or the
        embedded redis-server (our child too). That one used to be reaped here without a
        word, and the master then retried a Redis that nobody would ever start again."""
        if self.embedded is None or pid != self.embedded.pid:
            return
        code = os.waitstatus_to_exitcode(status)
        self.embedded.forget(code)
        log.error("embedded Redis (pid %d) exited (%s); starting it again", pid,
                  recovery.describe_status(code))

    def _mind_embedded(self) -> None:
        """Start the embedded Redis again if it died (its data is in its directory: AOF), as
        a supervisor would; the workers and the master reconnect by themselves."""
        if self.embedded is None or self.embedded.pid is not None:
            return
        if time.monotonic() < self.embedded_retry_at:
            return
        try:
            self.embedded.start()
        except QueuedError as e:
            self.embedded_retry_at = time.monotonic() + EMBEDDED_RETRY
            log.error("embedded Redis could not be started again (%s); retrying in %gs", e,
                      EMBEDDED_RETRY)
            return
        log.info("embedded Redis started again: pid=%d", self.embedded.pid)

    def _exited(self, rec: WorkerRecord, status: int) -> None:
        code = os.waitstatus_to_exitcode(status)
        lived = time.monotonic() - rec.spawned
        # A worker that died in a job (busy, or after finishing some) did boot: its crash is
        # the job's (counted and bounded by max_crashes below), not a reason to back off.
        # Backing off here let a few poison pills stall a slot for up to SPAWN_BACKOFF_MAX.
        v = self.table.read(rec.slot, writer_alive=False)
        ran_jobs = v.busy or v.processed > rec.processed_at_spawn
        if code == WORKER_BOOT_ERROR or (code != 0 and lived < BOOT_GRACE and not rec.kill_reason
                                         and not ran_jobs):
            self.boot_failures[rec.slot] += 1
            delay = min(SPAWN_BACKOFF * 2 ** self.boot_failures[rec.slot], SPAWN_BACKOFF_MAX)
            self.next_spawn[rec.slot] = time.monotonic() + delay
            log.error("worker %d (pid %d) died %.2fs after boot (%s); respawning in %.1fs",
                      rec.slot, rec.pid, lived, recovery.describe_status(code), delay)
        else:
            self.boot_failures[rec.slot] = 0
        # A worker exits 0 only between jobs (after TERM, or its parent gone). One that exits
        # while its slot says busy left in the middle of a job (os._exit(0) in job code, a
        # SystemExit escaping): a crash, whatever the status, so it counts toward the poison
        # pill limit (an exit 0 used to requeue the job for ever: 465 runs in 4 s).
        reason = rec.kill_reason or ("crash" if code != 0 or v.busy else "exit")
        # The job it ran is the one the slot table names (or the one the master killed for
        # its timeout), not simply the earliest reservation: a batch's finished jobs stay
        # reserved until their ack goes out. A worker that died between jobs ran none.
        seconds, running = rec.timeout_info or (0.0, v.jid if v.busy else "")
        self.unrecovered[rec.slot] = (code, reason, running, seconds)
        self._recover(rec.slot, code, reason, running, seconds)

    def _recover_pending(self) -> None:
        for slot, (code, reason, running, seconds) in list(self.unrecovered.items()):
            self._recover(slot, code, reason, running, seconds)

    def _recover(self, slot: int, code: int, reason: str, running: str, seconds: float) -> None:
        """Settle an exited worker's slot (recovery.settle); retried every loop while Redis
        is away, and the slot is not reused until it succeeds."""
        try:
            moved, failed, held = recovery.settle(
                self.r, self.keys, self.identity, self.config, slot, code=code, reason=reason,
                running_jid=running, timeout=seconds)
        except recovery.Stuck as e:
            if self.notes.due(("stuck", slot), KEY_LOG_INTERVAL):
                log.error("%s", e)
            return
        except (redis.RedisError, OSError) as e:  # see _redis_error
            self._redis_error("recover a worker's jobs", e)
            return
        if failed:
            self._count_failure(slot)
        if held is not None:
            self.held.append(held)
        self.unrecovered.pop(slot, None)
        if reason != "exit" or moved:
            log.log(logging.INFO if reason in ("exit", "shutdown") else logging.WARNING,
                    "worker %d %s (%s); %d job(s) put back at the head of their queues", slot,
                    reason if reason != "crash" else "died", recovery.describe_status(code),
                    moved)

    def _count_failure(self, slot: int) -> None:
        """The dead worker never counted this job; count it for the stats (the slot is free)."""
        SlotWriter(self.table, slot, 0).end(failed=True)

    def _murder(self) -> None:
        """Kill workers past timeout + grace (the job ignored SIGALRM), stuck idle workers,
        and at the shutdown deadline everyone left."""
        now = time.monotonic()  # not the wall clock: an NTP step must not kill a job early
        hard_stop = self.deadline is not None and now >= self.deadline
        for rec in list(self.workers.values()):
            if rec.kill_reason:
                continue
            v = self.table.read(rec.slot)
            if hard_stop:
                rec.kill_reason = "shutdown"
            elif v.busy and v.timeout and \
                    now - v.started > v.timeout + self.config.timeout_grace:
                rec.kill_reason, rec.timeout_info = "timeout", (v.timeout, v.jid)
                log.error("worker %d pid=%d: %s jid=%s ran %.1fs, past its %gs timeout + %gs "
                          "grace; killing it", rec.slot, rec.pid, v.job_class, v.jid,
                          now - v.started, v.timeout, self.config.timeout_grace)
            elif not v.busy and now - v.tick > self.silent_limit and \
                    now - rec.spawned > self.silent_limit:
                rec.kill_reason = "silent"
                log.error("worker %d pid=%d silent for %.0fs; killing it", rec.slot, rec.pid,
                          now - v.tick)
            else:
                continue
            self._kill(rec.pid, signal.SIGKILL)

    # --- timers ------------------------------------------------------------------------------
    def _timers(self) -> None:
        now = time.monotonic()
        if self.dumps and now >= self.next_dump:
            pid = self.dumps.pop(0)
            if pid in self.workers:
                self._kill(pid, signal.SIGUSR2)
                self.next_dump = now + DUMP_GAP
        if self.state == RUNNING:
            try:
                self.scheduler.tick(now)
            except (redis.RedisError, OSError) as e:  # see _redis_error
                self._redis_error("poll the schedule", e)
                self.scheduler.next_poll = now + 1.0
        if now >= self.next_beat:
            self.next_beat = now + self.config.heartbeat_interval
            self._beat()

    def _beat(self) -> None:
        views = self.table.views()
        busy = sum(1 for v in views if v.busy)
        state = {QUIET: "quiet", STOPPING: "stopping"}.get(self.state, "")
        titles.set_title(titles.master_title(self.config.tag, busy, self.config.concurrency, state))
        try:
            remote = self.heartbeat.beat(views, self.state != RUNNING, self.lease_ms)
            if self.heartbeat.lapse:  # frozen or cut off past the lease (heartbeat._lapse)
                log.warning("%s", self.heartbeat.lapse)
            if self.state == RUNNING:
                self.scheduler.elect()
            self._reap_expired()
            self._write_held()
        except (redis.RedisError, OSError) as e:  # see _redis_error
            self._redis_error("heartbeat", e)
            return
        if self.redis_down_since is not None:
            log.info("Redis is back after %.1fs", time.monotonic() - self.redis_down_since)
            self.redis_down_since = None
        events.fire("heartbeat")
        if remote:
            log.info("remote signal %s received", remote)
            {"TSTP": self.quiet, "USR1": self.quiet, "TERM": self.stop,
             "TTIN": self.dump}.get(remote, lambda why: None)(f"remote {remote}")

    def _write_held(self) -> None:
        """Try again to store the failures Redis refused (recovery.Held)."""
        for held in list(self.held):
            if recovery.write_held(self.r, self.keys, self.identity, self.config, held):
                self.held.remove(held)
                log.info("worker %d: the failure Redis refused is written now (%s)", held.slot,
                         held.kind)
        if self.held and self.notes.due("held", KEY_LOG_INTERVAL):
            log.error("%d failed job(s) stay reserved: their retry/dead key holds another Redis "
                      "type (WRONGTYPE)", len(self.held))

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

