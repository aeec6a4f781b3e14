"""Per-class job metrics in memory shared by the master and its workers, as Sidekiq keeps them.

For each (job class, queue) a worker counts the jobs that ended, the failed ones, the run time
of the successful ones (microseconds) and a histogram of those times in Sidekiq's 26 buckets
(metricskeys.BUCKETS). It does so with a few 8-byte stores into its slot's region of one
anonymous shared mapping the master made before forking: no Redis round trip, no lock, no
allocation per job (a worker of one job at a time adds a batch's counts up first and stores
them once: HeldRecorder). The master only reads (the heartbeat turns the differences into Sidekiq's
per-minute Redis keys, metricsflush.py; the Prometheus exporter serves the totals,
promserve.py), except in a region of its own for the failures it counts itself (a job whose
worker died under it and that took the failure path).

A region belongs to a worker SLOT, not to a process: a worker that replaces a dead or recycled
one carries on from the counts already there, so nothing is lost or counted twice when workers
come and go, and nothing grows with them (prometheus_client's multiprocess mode keeps one file
per pid that ever lived).

Region layout (8-byte words): a sequence counter (odd while the writer is inside a record: a
reader retries, so it sees a job's counts all together), the number of entries in use, then
CAPACITY keys of KEY_BYTES (``class NUL queue``, UTF-8, cut to fit) and CAPACITY rows of WORDS
counters. Entries are only appended; a key is written before the count that publishes it. The
last entry is OTHER: once a slot has seen CAPACITY - 1 distinct (class, queue) pairs, jobs of
any new pair are counted there, so memory stays bounded whatever class names payloads carry.
"""
from __future__ import annotations

import mmap
import threading
from bisect import bisect_right

from ..metricskeys import BUCKETS

#: Entries per region (the last one is OTHER).
CAPACITY = 1024
#: Bytes of a stored key: class (cut to CLASS_BYTES) NUL queue (cut to QUEUE_BYTES).
KEY_BYTES, CLASS_BYTES, QUEUE_BYTES = 256, 190, 64
#: The (class, queue) that counts the jobs of the pairs past a region's capacity.
OTHER = ("(other)", "(other)")
#: A row: processed (failures included, as Sidekiq's ``p``), failed, microseconds of the
#: successful jobs, then one counter per histogram bucket (successful jobs only).
PROCESSED, FAILED, MICROS, BUCKET0 = 0, 1, 2, 3
WORDS = BUCKET0 + len(BUCKETS)
#: Bucket bounds in microseconds, finite ones only: bisect_right gives Sidekiq's index
#: (the first bucket whose bound is above the time; past the last bound, the "Slow" one).
_BOUNDS_US = tuple(int(b * 1000) for b in BUCKETS[:-1])
#: Times a reader re-reads a region whose writer is inside a record before taking it as it is
#: (a writer frozen or killed in the middle leaves the counter odd; its fields are then at
#: worst one job apart, and its successor makes the counter even again).
READ_TRIES = 1000


def stored_key(klass: str, queue: str) -> bytes:
    return (klass.encode("utf-8", "replace")[:CLASS_BYTES] + b"\0"
            + queue.encode("utf-8", "replace")[:QUEUE_BYTES])


def _parse_key(raw: bytes) -> tuple[str, str]:
    klass, _, queue = raw.rstrip(b"\0").partition(b"\0")
    return klass.decode("utf-8", "replace"), queue.decode("utf-8", "replace")


class MetricsTable:
    """``regions`` regions of CAPACITY entries: one per worker slot, and the master's own
    (``master_region``). Made by the master before it forks; anonymous shared memory, whose
    pages the kernel provides only once touched."""

    def __init__(self, regions: int, capacity: int = CAPACITY):
        self.regions = regions
        self.capacity = capacity
        self._keys_at = 16  # bytes into a region
        self._rows_at = self._keys_at + capacity * KEY_BYTES
        self.region_bytes = self._rows_at + capacity * WORDS * 8
        self.mem = mmap.mmap(-1, max(1, regions) * self.region_bytes)
        self.words = memoryview(self.mem).cast("Q")
        for region in range(regions):
            self._put_key(region, capacity - 1, stored_key(*OTHER))

    @property
    def master_region(self) -> int:
        return self.regions - 1

    # word indexes
    def seq_at(self, region: int) -> int:
        return region * self.region_bytes // 8

    def row_at(self, region: int, entry: int) -> int:
        return (region * self.region_bytes + self._rows_at) // 8 + entry * WORDS

    def _key_off(self, region: int, entry: int) -> int:
        return region * self.region_bytes + self._keys_at + entry * KEY_BYTES

    def _put_key(self, region: int, entry: int, raw: bytes) -> None:
        off = self._key_off(region, entry)
        self.mem[off:off + KEY_BYTES] = raw.ljust(KEY_BYTES, b"\0")

    def raw_key(self, region: int, entry: int) -> bytes:
        off = self._key_off(region, entry)
        return self.mem[off:off + KEY_BYTES].rstrip(b"\0")

    def key(self, region: int, entry: int) -> tuple[str, str]:
        return _parse_key(self.raw_key(region, entry))

    def recorder(self, region: int, locked: bool = False, held: bool = False) -> Recorder:
        """``locked``: several threads of one worker record into the region (threads > 1);
        ``held``: a worker of one job at a time, which flushes its counts (HeldRecorder)."""
        if locked:
            return LockedRecorder(self, region)
        return HeldRecorder(self, region) if held else Recorder(self, region)

    def reader(self) -> Reader:
        return Reader(self)


class Recorder:
    """One writer's handle on its region: a worker's on its slot's (made in the worker after
    fork), or the master's on its own."""

    def __init__(self, table: MetricsTable, region: int):
        self.table = table
        self.region = region
        self.w = table.words
        self.seq = table.seq_at(region)
        self.used_at = self.seq + 1
        if self.w[self.seq] & 1:  # a writer killed inside a record left it odd
            self.w[self.seq] += 1
        self.other = table.row_at(region, table.capacity - 1)
        #: queue -> class -> row (no tuple made per job); stored key -> row, with what
        #: earlier writers of the region added
        self.index: dict[str, dict[str, int]] = {}
        self.rows = {table.raw_key(region, i): table.row_at(region, i)
                     for i in range(self.w[self.used_at])}

    def record(self, msg: dict, queue: str, seconds: float, failed: bool) -> None:
        """One job ended. Run time counts for successful jobs only, as Sidekiq's (a failure's
        time says little: it may have failed at once or at its timeout)."""
        row = self._row_of(msg, queue)
        w, seq = self.w, self.seq
        w[seq] += 1
        _count(w, row, seconds, failed)
        w[seq] += 1

    def flush(self) -> None:
        """(Counts are written as jobs end: nothing is held. See HeldRecorder.)"""

    def _row_of(self, msg: dict, queue: str) -> int:
        """The row of a job's class and queue. The class is Sidekiq's metrics class:
        ActiveJob's ``wrapped`` one, else ``class``."""
        klass = msg.get("wrapped") or msg.get("class")
        if klass.__class__ is not str:  # a payload's odd "wrapped" (a list, a number)
            klass = str(klass)
        rows = self.index.get(queue)
        row = rows.get(klass) if rows is not None else None
        return self._row(klass, queue) if row is None else row

    def _row(self, klass: str, queue: str) -> int:
        raw = stored_key(klass, queue)
        row = self.rows.get(raw.rstrip(b"\0"))
        if row is None:
            used = self.w[self.used_at]
            if used >= self.table.capacity - 1:
                return self.other  # not remembered: the index stays bounded too
            self.table._put_key(self.region, used, raw)
            self.w[self.used_at] = used + 1  # publishes the key written just before
            row = self.rows[raw.rstrip(b"\0")] = self.table.row_at(self.region, used)
        self.index.setdefault(queue, {})[klass] = row
        return row


def _count(words, row: int, seconds: float, failed: bool) -> None:
    """One job's counts added to the row at ``row`` of ``words`` (a region's, or a row of
    counts held: HeldRecorder). Run time counts for successful jobs only, as Sidekiq's."""
    words[row + PROCESSED] += 1
    if failed:
        words[row + FAILED] += 1
    else:
        # (0 for a monotonic clock stepped back, as a faked one can: an unsigned word
        # refuses a negative count, and the worker died of it, RT11)
        micros = int(seconds * 1_000_000) if seconds > 0.0 else 0
        words[row + MICROS] += micros
        words[row + BUCKET0 + bisect_right(_BOUNDS_US, micros)] += 1


class HeldRecorder(Recorder):
    """A worker of one job at a time: each job's counts are added up in the worker's own
    memory and written to its region by ``flush``, which the worker calls where it writes the
    done lines of its finished jobs (when a batch ends, and with the acks sent inside one:
    Runner.flush_ends). Eight-byte stores into shared memory were a tenth of a no-op job's
    instructions (issue 18); a batch's jobs now share one write per (class, queue). The
    runner flushes at once after any end but a success (written at once, not with the acks).
    As with the done lines, a kill -9 loses only the counts of jobs that succeeded and whose
    acks had not gone out either: those run again, and are counted then."""

    def __init__(self, table: MetricsTable, region: int):
        super().__init__(table, region)
        self.held: dict[int, list[int]] = {}  # row -> counts to add (a row's layout)

    def record(self, msg: dict, queue: str, seconds: float, failed: bool) -> None:
        row = self._row_of(msg, queue)
        counts = self.held.get(row)
        if counts is None:
            counts = self.held[row] = [0] * WORDS
        _count(counts, 0, seconds, failed)

    def flush(self) -> None:
        """Write the counts held (one record of the sequence counter for all of them)."""
        if not self.held:
            return
        w, seq = self.w, self.seq
        w[seq] += 1
        for row, counts in self.held.items():
            for i, n in enumerate(counts):
                if n:
                    w[row + i] += n
        w[seq] += 1
        self.held.clear()


class LockedRecorder(Recorder):
    """A worker's handle when its jobs end on several threads: the counters are read, added to
    and stored back, which two threads must not do at once (a count would be lost)."""

    def __init__(self, table: MetricsTable, region: int):
        super().__init__(table, region)
        self._lock = threading.Lock()

    def record(self, msg: dict, queue: str, seconds: float, failed: bool) -> None:
        with self._lock:
            super().record(msg, queue, seconds, failed)


class Reader:
    """The master's view: the totals of every region, summed by (class, queue). One per
    consumer (the heartbeat's flusher, the exporter's thread): each caches key names."""

    def __init__(self, table: MetricsTable):
        self.table = table
        self.names: list[list[tuple[str, str]]] = [[] for _ in range(table.regions)]

    def totals(self) -> dict[tuple[str, str], list[int]]:
        """{(class, queue): row} where row is [processed, failed, micros, *buckets]."""
        out: dict[tuple[str, str], list[int]] = {}
        for region in range(self.table.regions):
            for key, row in self._region(region):
                if not row[PROCESSED]:
                    continue
                acc = out.get(key)
                if acc is None:
                    out[key] = row
                else:
                    out[key] = [a + b for a, b in zip(acc, row)]
        return out

    def _region(self, region: int) -> list[tuple[tuple[str, str], list[int]]]:
        t, w = self.table, self.table.words
        seq = t.seq_at(region)
        first = t.row_at(region, 0)
        other = t.row_at(region, t.capacity - 1)
        for _ in range(READ_TRIES):
            before = w[seq]
            used = w[seq + 1]
            rows = w[first:first + used * WORDS].tolist() + w[other:other + WORDS].tolist()
            if not before & 1 and w[seq] == before:
                break
        names = self.names[region]
        while len(names) < used:
            names.append(t.key(region, len(names)))
        keys = names[:used] + [OTHER]
        return [(keys[i], rows[i * WORDS:(i + 1) * WORDS]) for i in range(used + 1)]
