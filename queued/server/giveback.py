"""Jobs a worker holds behind a slow one go back to their queue (issue 16: one worker held seven
quick jobs for 12 s behind a sleep(12) while two workers sat idle, and nothing showed them).

A worker of one job at a time reserves up to ``prefetch`` jobs in one round trip while its jobs
are short (worker.py ``_adapt``): most of a short job's cost is that round trip. The jobs of a
batch run one after the other, so a job that turns out slow holds the rest. It cannot give
them back itself (it is running the slow job, under SIGALRM, without a second thread), so the
master does: a worker's slot record says how many jobs it holds behind the one it runs
(``held``) and since when that one runs; once it has run HOLD_LIMIT, the master puts every
job reserved after it back at the head of its queue (requeue.lua, keeping the jobs before it:
finished, their acks still on the way), and raises the slot's ``revoked`` flag. Before its
next job of the batch the worker looks at the flag: raised, it drops the rest of the batch
(no longer its own) and asks Redis again.

The master's act and the worker's look must not interleave (the worker would start a job the
master is putting back: run twice). A byte-range lock on a file both hold (fcntl.lockf, one
byte per slot) orders them: the master acts only while the record still shows the job it
judged slow, under the lock; the worker looks under the same lock, after writing the end of
its job. A lock of POSIX ``lockf`` goes away with the process holding it, so a worker killed
while holding it cannot wedge its slot, and the master only ever tries it (LOCK_NB).

A worker of many jobs at once holds no job it cannot start (dispatch.py): it needs none of
this. Its ``held`` (jobs waiting to run alone) is shown, and counted in ``reserved``.
"""
from __future__ import annotations

import fcntl
import logging
import mmap
import tempfile
import time

import redis

from . import recovery
from .running import Running, find
from .slots import SlotTable

log = logging.getLogger("queued.master")

#: A job that has run this long with jobs reserved behind it gives them back (seconds).
HOLD_LIMIT = 0.02


class GiveBack:
    """The master's side, and the shared lock and flags the worker looks at."""

    def __init__(self, slots: int):
        self.slots = slots
        self.file = tempfile.TemporaryFile(prefix="queued-giveback-")  # (unlinked at once)
        self.flags = mmap.mmap(-1, max(1, slots))
        self.next_at: float | None = None

    # --- the worker's side ---------------------------------------------------------------------
    def revoked(self, slot: int, started: float | None = None) -> bool:
        """Before the worker's next job of a batch: did the master take the rest back? (It
        lowers the flag.) Under the lock, which the master holds while it acts.

        ``started``: the CLOCK_MONOTONIC stamp of the job just ended as its slot record had
        it (SlotWriter.started), read after that record turned idle. If less than HOLD_LIMIT
        has passed since, the master never acted on that job: it acts only on a record that
        still shows the job busy, at HOLD_LIMIT after that same stamp, by the same clock. So
        the lock (two system calls per job: issue 18) is taken only after a job that ran that
        long; an act on an earlier job of the batch was seen after that job."""
        if started is not None and time.monotonic() - started < HOLD_LIMIT:
            return False
        fd = self.file.fileno()
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, slot)
        try:
            if not self.flags[slot]:
                return False
            self.flags[slot] = 0
            return True
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, slot)

    def clear(self, slot: int) -> None:
        """Before a worker is forked into the slot (no worker owns it)."""
        self.flags[slot] = 0

    # --- the master's side ---------------------------------------------------------------------
    def due_in(self, now: float) -> float | None:
        return None if self.next_at is None else max(0.0, self.next_at - now)

    def step(self, r: redis.Redis, keys, identity: str, config, table: SlotTable,
             pids: dict[int, int]) -> None:
        """Give back what each live worker (slot -> pid) holds behind a job that has run
        HOLD_LIMIT or more; note when to look next. Redis errors go to the caller."""
        now = time.monotonic()
        self.next_at = None
        for slot, pid in pids.items():
            v = table.read(slot)
            if not (v.busy and v.held and v.pid == pid):
                continue
            due = v.started + HOLD_LIMIT
            if now < due:
                self.next_at = due if self.next_at is None else min(self.next_at, due)
                continue
            self._act(r, keys, identity, config, table, slot, v)

    def _act(self, r, keys, identity: str, config, table: SlotTable, slot: int, seen) -> None:
        fd = self.file.fileno()
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
        except OSError:
            self.next_at = time.monotonic()  # (the worker is between two jobs: next turn)
            return
        try:
            v = table.read(slot)
            if not (v.busy and v.held and v.jid == seen.jid and v.started == seen.started):
                return
            # Raised first: if the call below fails, or its reply is lost, the worker drops
            # its batch anyway, and its next reserve adopts whatever is still its own.
            self.flags[slot] = 1
            moved = give_back(r, keys, identity, config, slot, Running.of(v))
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, slot)
        if moved:
            log.info("worker %d: %s jid=%s has run %.0f ms with %d job(s) reserved behind it; "
                     "they went back to the head of their queues for an idle worker", slot,
                     v.job_class, v.jid, (time.monotonic() - v.started) * 1000, moved)


def give_back(r: redis.Redis, keys, identity: str, config, slot: int, job: Running) -> int:
    """Put back what a slot reserved after the job it runs (``job``: its record's, running.py;
    a later score: reserve.lua scores a batch in the order it runs it); keep it, those before
    it (finished, their acks on the way) and failures held (score -1). The number put back.
    The job is found by its place, not its jid: a finished copy of its jid sits before it,
    and keeping that one put the running job back while it ran (rt2 finding 5)."""
    members = r.zrange(keys.reserved(identity, slot), 0, -1, withscores=True)
    member = find([m for m, _ in members], job)
    if member is None:
        return 0
    score = next(s for m, s in members if m == member)
    keep = [m for m, s in members if s <= score]
    if len(keep) == len(members):
        return 0
    return recovery.requeue_slot(r, keys, identity, slot, config.queue_names, keep=keep)
