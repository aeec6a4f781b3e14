"""The slot table: what each worker is doing, in memory shared by the master and its workers.

The master maps one anonymous shared region before forking; worker N writes only record N,
the master only reads (except ``reset``, called while no worker owns the record). Writes are
plain stores, a few microseconds per job, and never touch Redis: the master turns this table
into heartbeats, stats and process titles, and uses it to find workers that overran their
job timeout or went silent.

A sequence counter makes the strings consistent to read (a seqlock): the writer makes it odd
before a change and even after; a reader retries while it is odd or has moved.
"""
from __future__ import annotations

import mmap
import struct
import time
from dataclasses import dataclass

IDLE, BUSY = 0, 1

# seq, pid, state, started_at(wall), tick(monotonic), timeout, processed, failed, jid, queue, class
_REC = struct.Struct("<QqB7xdddQQ24s64s128s")
_SEQ = struct.Struct("<Q")


@dataclass(frozen=True)
class SlotView:
    slot: int
    pid: int
    state: int
    started_at: float
    tick: float
    timeout: float
    processed: int
    failed: int
    jid: str
    queue: str
    job_class: str

    @property
    def busy(self) -> bool:
        return self.state == BUSY


def _b(text: str, size: int) -> bytes:
    return text.encode("utf-8", "replace")[:size]


def _s(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode("utf-8", "replace")


class SlotTable:
    def __init__(self, count: int):
        self.count = count
        self.mem = mmap.mmap(-1, max(1, count) * _REC.size)

    def _off(self, slot: int) -> int:
        return slot * _REC.size

    def reset(self, slot: int, pid: int = 0) -> None:
        _REC.pack_into(self.mem, self._off(slot), 0, pid, IDLE, 0.0, time.monotonic(), 0.0,
                       *self._counts(slot), b"", b"", b"")

    def _counts(self, slot: int) -> tuple[int, int]:
        v = self.read(slot)
        return v.processed, v.failed

    def read(self, slot: int) -> SlotView:
        off = self._off(slot)
        while True:
            fields = _REC.unpack_from(self.mem, off)
            if fields[0] % 2 == 0 and _SEQ.unpack_from(self.mem, off)[0] == fields[0]:
                break
            time.sleep(0)
        _, pid, state, started, tick, timeout, processed, failed, jid, queue, klass = fields
        return SlotView(slot, pid, state, started, tick, timeout, processed, failed,
                        _s(jid), _s(queue), _s(klass))

    def views(self) -> list[SlotView]:
        return [self.read(i) for i in range(self.count)]


class SlotWriter:
    """A worker's handle on its own record."""

    def __init__(self, table: SlotTable, slot: int, pid: int):
        self.mem = table.mem
        self.off = table._off(slot)
        v = table.read(slot)
        self.seq = _SEQ.unpack_from(self.mem, self.off)[0]
        self.pid = pid
        self.processed = v.processed
        self.failed = v.failed

    def _write(self, state: int, started: float, timeout: float, jid: str, queue: str,
               klass: str) -> None:
        self.seq += 1
        _SEQ.pack_into(self.mem, self.off, self.seq)
        _REC.pack_into(self.mem, self.off, self.seq, self.pid, state, started, time.monotonic(),
                       timeout, self.processed, self.failed,
                       _b(jid, 24), _b(queue, 64), _b(klass, 128))
        self.seq += 1
        _SEQ.pack_into(self.mem, self.off, self.seq)

    def begin(self, jid: str, queue: str, klass: str, timeout: float | None) -> None:
        self._write(BUSY, time.time(), timeout or 0.0, jid, queue, klass)

    def end(self, failed: bool) -> None:
        self.processed += 1
        if failed:
            self.failed += 1
        self._write(IDLE, 0.0, 0.0, "", "", "")

    def tick(self) -> None:
        """Prove liveness while idle (the master kills workers that go silent)."""
        self._write(IDLE, 0.0, 0.0, "", "", "")
