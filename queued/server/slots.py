"""The slot table: what each worker is doing, in memory shared by the master and its workers.

The master maps one anonymous shared region before forking. Each worker slot has one record,
or, when a process runs many jobs at once (``threads`` > 1), one record for the process (its
dispatcher's: pid, liveness tick, jobs reserved but not started, its event loop's lag) and one
per job lane (lane N is record N: what the job on thread N, or on the loop as lane N, is
doing). A worker of one job at a time writes its one record (record 0) exactly as before, so
the ``threads: 1`` path does not change. Each record has one writer (the worker's thread that
owns the lane while its job runs, or its main thread); the master only reads (except
``reset``, called while no worker owns the slot). Writes are plain stores, a few microseconds
per job, and never touch Redis: the master turns this table into heartbeats, stats and process
titles, and uses it to find jobs that overran their timeout and workers that went silent.

A sequence counter makes a record consistent to read (a seqlock): the writer makes it odd
before a change and even after; a reader retries while it is odd or has moved.
"""
from __future__ import annotations

import mmap
import struct
import time
from typing import Hashable, Iterable, NamedTuple

IDLE, BUSY = 0, 1


def slot_count(concurrency: int) -> int:
    """A master's worker slots: one per worker, and a spare when it has workers, so a worker
    being replaced keeps its slot (and the jobs it holds there) until its successor is up in
    the spare (rolling.py)."""
    return concurrency + 1 if concurrency else 0


def records_per_slot(lanes: int) -> int:
    """One record for a worker of one job at a time; the process's and one per lane else."""
    return 1 if lanes <= 1 else lanes + 1


#: Seconds a reader waits for a live writer to finish a write before taking the record as is.
READ_PATIENCE = 1.0

# A record is the sequence counter, then the body. They are packed separately on purpose:
# struct.pack_into zero-fills its whole region before writing the fields, so a counter inside
# the body would read as 0 (even, "stable") in the middle of a write.
_SEQ = struct.Struct("<Q")
# pid, state, held (jobs reserved, not started), started_at (wall, shown to people), started
# (monotonic, for timeouts), tick (monotonic), timeout, lag (seconds the process's event loop
# has been late, its dispatcher's record only), processed, failed, jid, queue, class, token
# (a job lane's: its reservation's, so the master finds the very job, not one of its jid).
# CLOCK_MONOTONIC is one clock for every process of a host, so the master can compare a
# worker's monotonic stamps with its own.
_BODY = struct.Struct("<qB3xIdddddQQ24s64s128s32s")
_SIZE = _SEQ.size + _BODY.size
#: An idle record's body: the numbers, then jid, queue, class and token cleared (pad bytes
#: are zeros)
_IDLE_BODY = struct.Struct("<qB3xIdddddQQ248x")
assert _IDLE_BODY.size == _BODY.size
_TIMEOUT_AT = struct.calcsize("<qB3xIddd")  # the timeout field's offset in the body
_STATE_AT = _SEQ.size + struct.calcsize("<q")  # the state byte's offset in a record


class SlotView(NamedTuple):
    slot: int
    pid: int
    state: int
    started_at: float
    started: float
    tick: float
    timeout: float
    processed: int
    failed: int
    jid: str
    queue: str
    job_class: str
    record: int = 0  # 0: the worker's own (its one job's, or its process's); N: lane N
    held: int = 0
    lag: float = 0.0
    token: str = ""  # a job lane's reservation token (running.py), else ""

    @property
    def busy(self) -> bool:
        return self.state == BUSY


def _b(text: str, size: int) -> bytes:
    return text.encode("utf-8", "replace")[:size]


def _s(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode("utf-8", "replace")


def stored_jid(jid: str) -> str:
    """A jid as the table stores and returns it (cut to its 24-byte field)."""
    return _s(_b(jid, 24))


def _view(slot: int, record: int, fields: tuple) -> SlotView:
    pid, state, held, started_at, started, tick, timeout, lag, processed, failed, jid, queue, \
        klass, token = fields
    return SlotView(slot, pid, state, started_at, started, tick, timeout, processed, failed,
                    _s(jid), _s(queue), _s(klass), record, held, lag, _s(token))


class SlotTable:
    def __init__(self, count: int, lanes: int = 1):
        self.count = count
        self.lanes = lanes
        self.per_slot = records_per_slot(lanes)
        self.mem = mmap.mmap(-1, max(1, count * self.per_slot) * _SIZE)

    def _off(self, slot: int, record: int = 0) -> int:
        return (slot * self.per_slot + record) * _SIZE

    def reset(self, slot: int, pid: int = 0) -> None:
        """Only while no worker owns the slot: before a fork, never after it (the child may
        already have written its first job into it), or after a reap."""
        for record in range(self.per_slot):
            off = self._off(slot, record)
            v = self.read(slot, writer_alive=False, record=record)
            _SEQ.pack_into(self.mem, off, 0)
            _BODY.pack_into(self.mem, off + _SEQ.size, pid, IDLE, 0, 0.0, 0.0, time.monotonic(),
                            0.0, 0.0, v.processed, v.failed, b"", b"", b"", b"")

    def read(self, slot: int, writer_alive: bool = True, record: int = 0) -> SlotView:
        """A consistent copy of one record. ``writer_alive=False`` (the worker has been
        reaped) reads once: a writer killed mid-write leaves the sequence odd for ever, and
        spinning on it hung the master. A live writer finishes within microseconds;
        READ_PATIENCE only bounds the wait if it was frozen (SIGSTOP) in the middle of a
        write."""
        off = self._off(slot, record)
        give_up = time.monotonic() + READ_PATIENCE
        while True:
            before = _SEQ.unpack_from(self.mem, off)[0]
            fields = _BODY.unpack_from(self.mem, off + _SEQ.size)
            if not writer_alive or (before % 2 == 0
                                    and _SEQ.unpack_from(self.mem, off)[0] == before):
                break
            if time.monotonic() > give_up:
                break
            time.sleep(0)
        return _view(slot, record, fields)

    def slot_views(self, slot: int, writer_alive: bool = True) -> list[SlotView]:
        """Every record of one slot (see ``_bulk``)."""
        return self._bulk(slot, slot + 1, writer_alive)

    def views(self) -> list[SlotView]:
        """Every record of every slot: busy counts and sums (processed, failed) over these
        count each job lane once; the process records of threaded workers are never busy."""
        return self._bulk(0, self.count, True)

    def _bulk(self, first: int, last: int, writer_alive: bool) -> list[SlotView]:
        """Records of slots first..last-1 from three copies of their region: the sequence
        counters of the first and the third bracket the body of the second (memcpy reads in
        no set order within one copy, but the copies follow one another), so a record whose
        counter is even and the same in both was read whole; any other is read on its own."""
        start, stop = self._off(first), self._off(last)
        before = self.mem[start:stop]
        body = self.mem[start:stop] if writer_alive else before
        after = self.mem[start:stop] if writer_alive else before
        out = []
        per = self.per_slot
        for i in range((stop - start) // _SIZE):
            off = i * _SIZE
            slot, record = divmod(first * per + i, per)
            if writer_alive and (before[off] & 1 or before[off:off + 8] != after[off:off + 8]):
                out.append(self.read(slot, True, record))
                continue
            out.append(_view(slot, record, _BODY.unpack_from(body, off + _SEQ.size)))
        return out

    def busy_count(self, slot: int | None = None) -> int:
        """Busy records of one slot (None: of all), from their state bytes alone: one strided
        copy, no record unpacked, so a master's idle tick costs next to nothing however many
        lanes its workers have (rt2 finding 8: 1,000 lanes each made it 22 % of a core). A
        byte is written whole: a count read mid-write is the one before or after it."""
        first, last = (0, self.count) if slot is None else (slot, slot + 1)
        return self.mem[self._off(first) + _STATE_AT:self._off(last):_SIZE].count(BUSY)

    def processed(self, slot: int) -> int:
        """Jobs the workers of a slot have finished, all lanes together."""
        return sum(v.processed for v in self.slot_views(slot, writer_alive=False))


class SlotWriter:
    """A worker's handle on one record: its own (record 0), or one job lane's.

    ``begin`` and ``end`` run twice per job, so each is one struct write between two stores
    of the sequence counter, with the job's queue and class encoded once while they repeat
    (issue 18: the two writes were 22,000 instructions per job, now about a third of that)."""

    def __init__(self, table: SlotTable, slot: int, pid: int, record: int = 0):
        self.mem = table.mem
        self.off = table._off(slot, record)
        self.body = self.off + _SEQ.size
        #: the sequence counter, stored as one 8-byte word (a memoryview store: pack_into
        #: would clear the word first, showing readers a 0, an even "stable" value, mid-write)
        self.word = memoryview(table.mem)[self.off:self.off + 8].cast("Q")
        v = table.read(slot, writer_alive=False, record=record)
        seq = self.word[0]
        self.seq = seq + (seq & 1)  # a writer killed mid-write left it odd; start even
        self.pid = pid
        self.processed = v.processed
        self.failed = v.failed
        #: CLOCK_MONOTONIC of the last ``begin`` (the master's ``started``: giveback.py)
        self.started = 0.0
        self._queue = self._klass = None
        self._queue_b = self._klass_b = b""

    def _write(self, state: int, started_at: float, timeout: float, jid: str, queue: str,
               klass: str, held: int = 0, lag: float = 0.0, token: bytes = b"") -> None:
        word = self.word
        word[0] = self.seq = self.seq + 1
        now = time.monotonic()
        _BODY.pack_into(self.mem, self.body, self.pid, state, held, started_at,
                        now if state == BUSY else 0.0, now, timeout, lag, self.processed,
                        self.failed, _b(jid, 24), _b(queue, 64), _b(klass, 128), token)
        word[0] = self.seq = self.seq + 1

    def begin(self, jid: str, queue: str, klass: str, timeout: float | None,
              held: int = 0, member: bytes = b"") -> None:
        """A job starts; ``held``: jobs reserved behind it, not started (giveback.py). The
        record of a worker of one job at a time finds its job by ``held`` (running.py), so
        ``member`` (its reservation) is not looked at here (its token field stays empty):
        see LaneWriter."""
        if queue != self._queue:
            self._queue, self._queue_b = queue, _b(queue, 64)
        if klass != self._klass:
            self._klass, self._klass_b = klass, _b(klass, 128)
        word = self.word
        word[0] = self.seq = self.seq + 1
        self.started = now = time.monotonic()
        _BODY.pack_into(self.mem, self.body, self.pid, BUSY, held, time.time(), now, now,
                        timeout or 0.0, 0.0, self.processed, self.failed,
                        jid.encode("utf-8", "replace")[:24], self._queue_b, self._klass_b, b"")
        word[0] = self.seq = self.seq + 1

    def ending(self) -> None:
        """The job has run; its end is being written (by another thread): still busy, its
        time limit no longer counts (the master must not kill for a slow write)."""
        word = self.word
        word[0] = self.seq = self.seq + 1
        struct.pack_into("<d", self.mem, self.body + _TIMEOUT_AT, 0.0)
        word[0] = self.seq = self.seq + 1

    def end(self, failed: bool) -> None:
        self.processed += 1
        if failed:
            self.failed += 1
        word = self.word
        word[0] = self.seq = self.seq + 1
        _IDLE_BODY.pack_into(self.mem, self.body, self.pid, IDLE, 0, 0.0, 0.0,
                             time.monotonic(), 0.0, 0.0, self.processed, self.failed)
        word[0] = self.seq = self.seq + 1

    def tick(self, held: int = 0, lag: float = 0.0, blocker: str = "") -> None:
        """Prove liveness while idle (the master kills workers that go silent). The process
        record of a worker of many jobs also says what it holds unstarted, its event loop's
        lag and, while the loop is stuck, the jid of the job it is stuck in (watchdog.py)."""
        self._write(IDLE, 0.0, 0.0, blocker, "", "", held, lag)


class LaneWriter(SlotWriter):
    """A job lane's record: it also names its job's reservation by its token (running.py),
    since two lanes may run jobs of one jid."""

    def begin(self, jid: str, queue: str, klass: str, timeout: float | None,
              held: int = 0, member: bytes = b"") -> None:
        a = member.find(b"\0")
        token = member[a + 1:member.find(b"\0", a + 1)][:32] if a >= 0 else b""
        self.started = time.monotonic()
        self._write(BUSY, time.time(), timeout or 0.0, jid, queue, klass, held, token=token)


class Notes:
    """Timestamps shared by the master and its workers (one anonymous shared mapping, made
    before fork), one per label: a condition every worker meets, such as a queue key of the
    wrong Redis type, is then logged once per interval by the whole daemon, not once by
    each worker. Labels are fixed when the master makes it (an int n means labels 0..n-1).
    Each value is one aligned 8-byte store, so a reader never sees half of it."""

    def __init__(self, labels: int | Iterable[Hashable]):
        labels = range(labels) if isinstance(labels, int) else labels
        self.index = {label: i for i, label in enumerate(labels)}
        self.mem = mmap.mmap(-1, max(1, len(self.index)) * 8)

    def _get(self, i: int) -> float:
        return struct.unpack_from("<d", self.mem, i * 8)[0]

    def _put(self, i: int, value: float) -> None:
        self.mem[i * 8:i * 8 + 8] = struct.pack("<d", value)

    def due(self, label: Hashable, interval: float, now: float | None = None) -> bool:
        """True, and the time noted, unless ``label`` was noted within the last ``interval``."""
        i = self.index[label]
        now = time.monotonic() if now is None else now
        last = self._get(i)
        if last and now - last < interval:
            return False
        self._put(i, now)
        return True

    def clear(self, label: Hashable) -> bool:
        """Forget ``label``; True if it was noted."""
        i = self.index[label]
        if not self._get(i):
            return False
        self._put(i, 0.0)
        return True


class Watch:
    """Which queue each idle worker is blocked on, and the Redis client id of its connection
    (one anonymous shared mapping, made before fork). BLMOVE waits on one list only, so a
    worker going idle picks a queue no other idle worker waits on; a job pushed to a queue
    nobody waits on is seen by the master (waker.py), which wakes an idle worker with
    ``CLIENT UNBLOCK`` and that client id. Per slot: the queue (0: not blocked, else index + 1)
    and the client id (0: none), written only by the slot's worker (and by the master while the
    slot has none), so no lock is needed. The worker stores its client id before it ever
    marks itself blocked, so a reader that sees a queue sees the right id."""

    _SLOT = struct.Struct("<H6xQ")
    #: The queue index stored for a worker that waits on no queue (every one of its queues is
    #: paused): the waker may wake it for anything.
    NO_QUEUE = 0xFFFE

    def __init__(self, slots: int):
        self.slots = slots
        self.mem = mmap.mmap(-1, max(1, slots) * self._SLOT.size)
        self._all = struct.Struct("<" + "H6xQ" * slots)

    def set(self, slot: int, queue: int | None) -> None:
        struct.pack_into("<H", self.mem, slot * self._SLOT.size, 0 if queue is None else queue + 1)

    def set_client(self, slot: int, client_id: int) -> None:
        struct.pack_into("<Q", self.mem, slot * self._SLOT.size + 8, client_id)

    def clear(self, slot: int) -> None:
        self._SLOT.pack_into(self.mem, slot * self._SLOT.size, 0, 0)

    def _values(self) -> tuple:
        return self._all.unpack_from(self.mem)

    def others(self, slot: int) -> set[int]:
        """Indexes of the queues the other slots' workers are blocked on."""
        values = self._values()
        return {values[2 * i] - 1 for i in range(self.slots) if values[2 * i] and i != slot}

    def blocked(self) -> dict[int, tuple[int, int]]:
        """slot -> (queue index, client id) of every worker blocked now (with a known id)."""
        values = self._values()
        return {i: (values[2 * i] - 1, values[2 * i + 1]) for i in range(self.slots)
                if values[2 * i] and values[2 * i + 1]}
