"""The master's worker processes: fork, reap, respawn with backoff, and the kills.

Owns the record of each live worker (pid -> slot, and its queue group: groups.py) and which
slots are free; classifies how a worker ended (a plain exit between jobs, a crash, a kill the
master decided) and which jobs it was running (one, or one per busy lane of a worker of many
jobs at once); kills the workers with a job past its timeout + grace (after asking them for
their stack; the jobs past it are the culprits, the others running bystanders, and a job the
worker's event loop is stuck in is the culprit of the async jobs that waited on it), the idle
ones gone silent, and everyone left at the shutdown deadline.

A master has one slot more than it has workers (slots.slot_count): a worker being replaced (a
rolling restart, rolling.py) is marked ``leaving``, which makes room for its successor in the
spare slot; it is asked to stop (``retire``) only once every other worker is up, and killed if
it is still running its job ``shutdown_timeout`` later.

Does not own what happens to the jobs of an exited worker (master.py hands that to
recovery.py), nor signals or timers (mastersignals.py, mastertimers.py), nor which worker to
replace when (rolling.py).
"""
from __future__ import annotations

import logging
import os
import signal
import time
from typing import Callable, NamedTuple

from .. import events
from . import recovery
from .running import Running
from ..errors import WORKER_BOOT_ERROR
from .slots import SlotTable, Watch, slot_count
from .worker import Worker

log = logging.getLogger("queued.master")

#: A worker that dies sooner than this after its fork counts as a boot failure (backoff).
BOOT_GRACE = 2.0
#: Respawn backoff after repeated boot failures: first delay, cap (seconds).
SPAWN_BACKOFF, SPAWN_BACKOFF_MAX = 0.1, 30.0
#: Seconds a worker past its timeout gets to log its stack (TTIN) before the master kills it.
STACK_WAIT = 0.3
#: An idle worker that has not ticked for this long beyond its blocking fetch (fetch_timeout)
#: is stuck and is killed (seconds).
SILENT_LIMIT = 60.0

#: What the master says about a worker it killed itself (not "killed by SIGKILL (out of
#: memory?)": the master knows why).
KILLED_BY_MASTER = {
    "shutdown": "killed by the master at the shutdown deadline",
    "timeout": "killed by the master: its job ran past its timeout + grace",
    "silent": "killed by the master: silent (stuck)",
    "replaced": "killed by the master: still running its job shutdown_timeout after a rolling "
                "restart asked it to stop",
}


class WorkerRecord:
    def __init__(self, slot: int, pid: int, processed: int = 0, generation: int = 0,
                 group: int = 0):
        self.slot = slot
        self.pid = pid
        self.group = group                    # its index in config.worker_groups
        self.spawned = time.monotonic()
        self.processed_at_spawn = processed  # the slot's job count when this worker began
        self.generation = generation          # of the job code it was forked with (rolling.py)
        self.leaving = False                  # being replaced: its successor may start
        self.stop_by: float | None = None     # asked to stop (TERM); killed if still here then
        self.kill_reason: str | None = None   # "timeout", "shutdown", "silent", "replaced"
        self.kill_at: float | None = None     # when the SIGKILL goes (after its stack dump)
        #: each job whose timeout made the master kill it (running.py) -> its charge
        self.culprits: dict[Running, recovery.Charge] | None = None


class Exit(NamedTuple):
    slot: int
    code: int            # os.waitstatus_to_exitcode
    reason: str          # "exit", "crash", or the master's kill reason
    running: tuple       # the jobs it ran (running.Running, as its records name them; none
                         # between jobs)
    culprits: dict       # for a timeout kill: Running -> recovery.Charge of the jobs past it
    lanes: bool = False  # a worker of many jobs at once (its culprits ignored a JobTimeout)

    def describe(self) -> str:
        return KILLED_BY_MASTER.get(self.reason) or recovery.describe_status(self.code)


class Children:
    def __init__(self, config, table: SlotTable, watch: Watch,
                 make_worker: Callable[[int, int], Worker], in_child: Callable[[], None],
                 block_signals: tuple):
        self.config = config
        self.table = table
        self.watch = watch
        self.make_worker = make_worker  # (slot, group) -> Worker, built before each fork
        self.in_child = in_child        # closes the master's plumbing in a forked child
        self.block_signals = block_signals
        self.workers: dict[int, WorkerRecord] = {}       # pid -> record
        slots = slot_count(config.process_count)
        self.free: set[int] = set(range(slots))
        self.slot_group: dict[int, int] = {}  # the group of the worker a slot had last
        self.boot_failures = [0] * slots
        self.next_spawn = [0.0] * slots
        self.generation = 0  # of the job code the master has loaded (rolling.py counts them)
        self.reconfigure(config)

    def reconfigure(self, config) -> None:
        self.config = config
        # An idle worker ticks its record before each blocking fetch, which lasts up to
        # fetch_timeout: only silence beyond that is a stuck worker (a fixed 60 s limit killed
        # the idle workers of a daemon with fetch_timeout above 60 s every minute).
        self.silent_limit = SILENT_LIMIT + config.fetch_timeout

    # --- fork --------------------------------------------------------------------------------
    def spawn(self, busy_slots) -> None:
        """Fork workers until each group (config.worker_groups) has its ``concurrency`` of
        them serving (not counting a leaving one). A free slot whose worker is due back (in
        backoff after a boot failure, or holding jobs that were not put back yet:
        ``busy_slots``) keeps its turn in its group, so the spare slot is no way round the
        backoff; of the others, one the group had before goes first, then one that failed at
        boot (its backoff keeps growing), then the lowest."""
        now = time.monotonic()
        waiting = {s for s in self.free if s in busy_slots or now < self.next_spawn[s]}
        ready = sorted(self.free - waiting, key=lambda s: (-self.boot_failures[s], s))
        for g, group in enumerate(self.config.worker_groups):
            serving = sum(1 for r in self.workers.values() if not r.leaving and r.group == g)
            held = sum(1 for s in waiting if self.slot_group.get(s, 0) == g)
            for _ in range(group.concurrency - serving - held):
                if not ready:
                    return
                slot = next((s for s in ready if self.slot_group.get(s) == g), ready[0])
                ready.remove(slot)
                self.fork(slot, g)

    def fork(self, slot: int, group: int = 0) -> None:
        worker = self.make_worker(slot, group)
        # The record is made ready before the fork and left to the child after it: a reset
        # here after fork() overwrote the record of a child that had already begun a job,
        # hiding it from the timeout kill, the heartbeat and the crash count.
        self.table.reset(slot)
        processed = self.table.processed(slot)
        self.watch.clear(slot)  # its previous worker may have died while blocked
        events.fire("before_fork")  # e.g. queued.django closes the master's DB connections
        old = signal.pthread_sigmask(signal.SIG_BLOCK, self.block_signals)
        try:
            pid = os.fork()
            if pid == 0:  # the child: forget the master's plumbing, then run
                self.in_child()
                worker.run()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        self.workers[pid] = WorkerRecord(slot, pid, processed, self.generation, group)
        self.slot_group[slot] = group
        self.free.discard(slot)

    def up(self) -> bool:
        """Each group's ``concurrency`` workers that are not leaving, each started: it has
        written its own pid into its record (the first thing it does after its setup).
        systemd's READY=1 waits for this, and so does a rolling restart before it stops a
        leaving worker."""
        serving = [rec for rec in self.workers.values() if not rec.leaving]
        return all(sum(1 for rec in serving if rec.group == g) >= group.concurrency
                   for g, group in enumerate(self.config.worker_groups)) and all(
            self.table.read(rec.slot).pid == rec.pid for rec in serving)

    def serves(self, slot: int, queue: str) -> bool:
        """Whether the worker in ``slot`` takes jobs from ``queue`` (its group's queues)."""
        groups = self.config.worker_groups
        g = self.slot_group.get(slot)
        return g is not None and g < len(groups) and queue in groups[g].queue_names

    def retire(self, rec: WorkerRecord, stop_by: float) -> None:
        """Ask a leaving worker to stop: it finishes the job in hand and exits (TERM); at
        ``stop_by`` it is killed (``murder``) and that job goes back to its queue."""
        rec.leaving, rec.stop_by = True, stop_by
        self.kill(rec.pid, signal.SIGTERM)

    # --- reap --------------------------------------------------------------------------------
    def reap(self, other: Callable[[int, int], None]) -> list[Exit]:
        """Every child that exited: workers come back as Exits (their slots free again),
        any other child goes to ``other(pid, status)``."""
        exits = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return exits
            if pid == 0:
                return exits
            rec = self.workers.pop(pid, None)
            if rec is None:
                other(pid, status)
                continue
            self.free.add(rec.slot)
            exits.append(self.exited(rec, status))

    def exited(self, rec: WorkerRecord, status: int) -> Exit:
        code = os.waitstatus_to_exitcode(status)
        lived = time.monotonic() - rec.spawned
        # A worker that died in a job (busy, or after finishing some) did boot: its crash is
        # the job's (counted and bounded by max_crashes), not a reason to back off. Backing
        # off here let a few poison pills stall a slot for up to SPAWN_BACKOFF_MAX.
        views = self.table.slot_views(rec.slot, writer_alive=False)
        busy = tuple(Running.of(v) for v in views if v.busy)
        ran_jobs = bool(busy) or sum(v.processed for v in views) > rec.processed_at_spawn
        if code == WORKER_BOOT_ERROR or (code != 0 and lived < BOOT_GRACE and not rec.kill_reason
                                         and not ran_jobs):
            self._back_off(rec, lived, code)
        else:
            self.boot_failures[rec.slot] = 0
        # A worker exits 0 only between jobs (after TERM, or its parent gone). One that exits
        # while its slot says busy left in the middle of a job (os._exit(0) in job code, a
        # SystemExit escaping): a crash, whatever the status, so it counts toward the poison
        # pill limit (an exit 0 used to requeue the job for ever: 465 runs in 4 s).
        reason = rec.kill_reason or ("crash" if code != 0 or busy else "exit")
        # The jobs it ran are the ones the slot table names (and those the master killed it
        # for, past their timeout), not simply the earliest reservations: a batch's finished
        # jobs stay reserved until their ack goes out. A worker between jobs ran none.
        return Exit(rec.slot, code, reason, busy, rec.culprits or {}, len(views) > 1)

    def _back_off(self, rec: WorkerRecord, lived: float, code: int) -> None:
        self.boot_failures[rec.slot] += 1
        delay = min(SPAWN_BACKOFF * 2 ** self.boot_failures[rec.slot], SPAWN_BACKOFF_MAX)
        self.next_spawn[rec.slot] = time.monotonic() + delay
        log.error("worker %d (pid %d) died %.2fs after boot (%s); respawning in %.1fs",
                  rec.slot, rec.pid, lived, recovery.describe_status(code), delay)

    # --- kill --------------------------------------------------------------------------------
    def signal_all(self, sig: int) -> None:
        for pid in list(self.workers):
            self.kill(pid, sig)

    @staticmethod
    def kill(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def murder(self, hard_stop: bool) -> None:
        """Kill workers past timeout + grace (the job ignored SIGALRM; first asked for their
        stack, then killed STACK_WAIT later), stuck idle workers, and, at the shutdown
        deadline, everyone left."""
        now = time.monotonic()  # not the wall clock: an NTP step must not kill a job early
        for rec in list(self.workers.values()):
            if rec.kill_at is not None:
                if hard_stop or now >= rec.kill_at:
                    rec.kill_at = None
                    self.kill(rec.pid, signal.SIGKILL)
                continue
            if rec.kill_reason:
                continue
            # (only a slot with a busy record is read whole: an idle one's own record tells)
            views = (self.table.slot_views(rec.slot) if self.table.busy_count(rec.slot)
                     else [self.table.read(rec.slot)])
            v = views[0]
            late = [j for j in views if j.busy and j.timeout
                    and now - j.started > j.timeout + self.config.timeout_grace]
            if hard_stop:
                rec.kill_reason = "shutdown"
            elif late:
                self._past_timeout(rec, late, views, now)
                continue
            elif not any(j.busy for j in views) and now - v.tick > self.silent_limit and \
                    now - rec.spawned > self.silent_limit:
                rec.kill_reason = "silent"
                log.error("worker %d pid=%d silent for %.0fs; killing it", rec.slot, rec.pid,
                          now - v.tick)
            elif rec.stop_by is not None and now >= rec.stop_by:
                rec.kill_reason = "replaced"
                running = [j for j in views if j.busy]
                log.warning("worker %d pid=%d is still running %s %gs after the rolling "
                            "restart asked it to stop; killing it (its jobs go back to their "
                            "queues)", rec.slot, rec.pid, _named(running) or "nothing",
                            self.config.shutdown_timeout)
            else:
                continue
            self.kill(rec.pid, signal.SIGKILL)

    def _past_timeout(self, rec: WorkerRecord, late: list, views: list, now: float) -> None:
        """Jobs ran past their timeout + grace: kill their process. Each of them is charged
        with its timeout (recovery.settle); but if the process's event loop is stuck in one
        job (its record names it: watchdog.py), the async jobs past their limit waited on
        that one, which alone is charged. The others running are bystanders: they go back."""
        blocker = views[0].jid if len(views) > 1 and not views[0].busy else ""
        stuck = [j for j in views[1:] if j.busy and j.jid == blocker] if blocker else []
        lag = views[0].lag if stuck else 0.0
        if stuck:
            late = stuck
        rec.kill_reason = "timeout"
        rec.culprits = {Running.of(j): recovery.Charge(j.timeout, lag) for j in late}
        rec.kill_at = now + STACK_WAIT
        others = [j for j in views if j.busy and Running.of(j) not in rec.culprits]
        for j in late:
            if stuck and not j.timeout:  # (no limit of its own: rt2 finding 7)
                log.error("worker %d pid=%d: %s jid=%s has blocked the event loop for %.1fs, "
                          "past the time limits + %gs grace of the async jobs waiting on it; "
                          "asking it for its stack, then killing it", rec.slot, rec.pid,
                          j.job_class, j.jid, lag, self.config.timeout_grace)
                continue
            log.error("worker %d pid=%d: %s jid=%s ran %.1fs, past its %gs timeout + %gs "
                      "grace; asking it for its stack, then killing it", rec.slot, rec.pid,
                      j.job_class, j.jid, now - j.started, j.timeout,
                      self.config.timeout_grace)
        if others:
            log.warning("worker %d pid=%d: its %d other running job(s) go back to their "
                        "queues, no retry spent: %s", rec.slot, rec.pid, len(others),
                        _named(others))
        self.kill(rec.pid, signal.SIGTTIN)

    def next_kill_in(self, now: float) -> float | None:
        """Seconds until a pending SIGKILL (after a stack dump, or a replaced worker's
        deadline) is due, if any."""
        times = [rec.kill_at if rec.kill_at is not None else rec.stop_by
                 for rec in self.workers.values() if rec.kill_at is not None
                 or (rec.stop_by is not None and not rec.kill_reason)]
        return max(0.0, min(times) - now) if times else None


def _named(views: list) -> str:
    return ", ".join(f"{v.job_class} jid={v.jid}" for v in views)
