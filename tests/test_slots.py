"""queued.server.slots: the shared-memory table workers write and the master reads.

The seqlock is checked the only way that means anything: a forked process writes as fast as it
can while this process reads, and no read may mix two writes.
"""
from __future__ import annotations

import os
import signal
import struct
import time

import pytest

from queued.server import slots
from queued.server.slots import BUSY, IDLE, SlotTable, SlotWriter

from harness import wait_for


def test_a_fresh_table_is_idle_and_empty():
    t = SlotTable(3)
    views = t.views()
    assert [v.slot for v in views] == [0, 1, 2]
    assert all(v.state == IDLE and not v.busy and v.jid == "" and v.processed == 0
               for v in views)


def test_writer_reader_round_trip():
    t = SlotTable(2)
    t.reset(1, 4242)
    w = SlotWriter(t, 1, 4242)
    before = time.time()
    w.begin("15acda24f01de58f49b27035", "critical", "Billing::InvoiceJob", 30.0)
    v = t.read(1)
    assert v.busy and v.state == BUSY
    assert (v.slot, v.pid, v.jid, v.queue, v.job_class, v.timeout) == (
        1, 4242, "15acda24f01de58f49b27035", "critical", "Billing::InvoiceJob", 30.0)
    assert before <= v.started_at <= time.time()
    assert abs(v.tick - time.monotonic()) < 1
    # the other slot is untouched
    assert t.read(0).pid == 0 and not t.read(0).busy
    w.end(failed=True)
    v = t.read(1)
    assert not v.busy and (v.jid, v.queue, v.job_class) == ("", "", "")
    assert (v.processed, v.failed) == (1, 1)
    w.begin("b" * 24, "default", "X", None)
    assert t.read(1).timeout == 0.0
    w.end(failed=False)
    assert (t.read(1).processed, t.read(1).failed) == (2, 1)


def test_unicode_and_long_names_are_cut_to_their_fields():
    t = SlotTable(1)
    w = SlotWriter(t, 0, 1)
    w.begin("j" * 30, "q\u00e9" * 10, "C" * 200, None)
    v = t.read(0)
    assert v.jid == "j" * 24
    assert v.queue == "q\u00e9" * 10
    assert v.job_class == "C" * 128


def test_tick_proves_liveness_without_touching_counts():
    t = SlotTable(1)
    w = SlotWriter(t, 0, 1)
    w.begin("a" * 24, "q", "X", None)
    w.end(False)
    first = t.read(0).tick
    time.sleep(0.01)  # the tick is a monotonic timestamp: let the clock move
    w.tick()
    v = t.read(0)
    assert v.tick > first and v.processed == 1 and not v.busy


def test_reset_keeps_counters():
    t = SlotTable(1)
    t.reset(0, 100)
    w = SlotWriter(t, 0, 100)
    w.begin("a" * 24, "q", "X", 5)
    w.end(False)
    w.begin("b" * 24, "q", "X", 5)
    w.end(True)
    w.begin("c" * 24, "q", "X", 5)  # killed mid-job
    t.reset(0, 200)
    v = t.read(0)
    assert (v.pid, v.busy, v.jid) == (200, False, "")
    assert (v.processed, v.failed) == (2, 1)
    w2 = SlotWriter(t, 0, 200)
    w2.begin("d" * 24, "q", "X", None)
    w2.end(False)
    assert (t.read(0).processed, t.read(0).failed) == (3, 1)


# The two jobs the forked writer alternates between: a torn read mixes their fields.
A = ("a" * 24, "alpha", "AlphaJob")
B = ("b" * 24, "beta-queue-with-a-longer-name", "B")
IDLE_FIELDS = ("", "", "")


def _consistent(v, writer_pid: int) -> bool:
    fields = (v.jid, v.queue, v.job_class)
    if v.pid != writer_pid or v.tick == 0.0 or v.failed > v.processed:
        return False
    if v.busy:
        return (fields == A and v.timeout == 1.0) or (fields == B and v.timeout == 2.0)
    return fields == IDLE_FIELDS and v.timeout == 0.0 and v.started_at == 0.0


def test_reader_never_sees_a_torn_record_under_a_concurrent_writer():
    # Given a forked worker writing its record as fast as it can, until told to stop (a
    # second shared record is the stop flag, so the writer outlasts every read below)
    t = SlotTable(2)
    t.reset(0, 0)
    stop = SlotTable(1)
    pid = os.fork()
    if pid == 0:  # the writer: hammer begin/end until the flag is set, then leave
        try:
            w = SlotWriter(t, 0, os.getpid())
            deadline = time.monotonic() + 60  # never reached unless the parent is gone
            while stop.read(0, writer_alive=False).pid == 0 and time.monotonic() < deadline:
                for _ in range(50):
                    w.begin(*A, 1.0)
                    w.end(False)
                    w.begin(*B, 2.0)
                    w.end(True)
        finally:
            os._exit(0)
    try:
        wait_for(lambda: t.read(0).pid == pid, what="the writer's first write")
        # When the master reads the record over and over meanwhile, for at least 0.7 s and
        # until it has watched the writer get through many writes
        reads, last_processed, gave_up = 0, 0, 0
        torn, states, first = [], set(), None
        window = time.monotonic() + 0.7
        deadline = time.monotonic() + 30
        while time.monotonic() < window or (
                len(states) < 3 or last_processed - first < 1000) and time.monotonic() < deadline:
            t0 = time.monotonic()
            v = t.read(0)
            if time.monotonic() - t0 >= 0.9 * slots.READ_PATIENCE:
                gave_up += 1  # the reader stopped waiting for a quiet moment: by design
                continue
            reads += 1
            # Then every read is one whole write: never two writes mixed, never a half-zeroed
            # record, and the counters never go back
            if _consistent(v, pid) and v.processed >= last_processed:
                last_processed = v.processed
                first = v.processed if first is None else first
                states.add(v.jid or "idle")
            else:
                torn.append(v)
        assert torn == [], f"{len(torn)} torn reads of {reads}, e.g. {torn[:3]}"
        # And the reads really overlapped the writes: the reader saw the writer's three
        # states (busy with A, busy with B, idle) and a thousand or more jobs go by
        assert states == {A[0], B[0], "idle"}, states
        assert last_processed - first >= 1000, (first, last_processed, reads, gave_up)
    finally:
        SlotWriter(stop, 0, 1).tick()  # the stop flag: pid 1 in the stop record
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


class _SeqSpy:
    """Stands in for the writer's sequence number. Whenever the writer stores it, records
    what the sequence word in shared memory holds at that instant (after any zero-fill the
    store does first, before the new value lands)."""

    def __init__(self, value, mem, off, seen):
        self.value, self.mem, self.off, self.seen = value, mem, off, seen

    def _look(self):
        self.seen.append(struct.unpack_from("<Q", self.mem, self.off)[0])
        return self.value

    def __add__(self, n):
        return _SeqSpy(self.value + n, self.mem, self.off, self.seen)

    def __and__(self, n):
        return self.value & n

    def __index__(self):
        return self._look()

    __int__ = __index__

    def to_bytes(self, *args, **kwargs):
        return self._look().to_bytes(*args, **kwargs)


def test_the_sequence_word_only_ever_holds_sequence_values():
    # A seqlock reader accepts what it read when it saw the same even value before and after.
    # So the sequence word may only ever hold S, S+1, S+2 ...: if a store first zero-fills the
    # word (CPython's struct.pack_into does), a reader can see 0 at the start of one write
    # and 0 again at its end, and accept the half-written body it read in between.
    t = SlotTable(2)
    w = SlotWriter(t, 1, 1)
    w.begin("a" * 24, "q", "X", None)
    start = int(w.seq)
    seen = []
    w.seq = _SeqSpy(start, t.mem, t._off(1), seen)
    w.end(False)
    assert all(start <= x <= start + 2 for x in seen), f"sequence word seen as {seen}"
    assert t.read(1).processed == 1 and not t.read(1).busy


class _Clock:
    """Stands in for the time module inside queued.server.slots: the monotonic clock moves only when
    a reader waits (10 ms per wait), so how long a read waited is counted, not timed."""

    def __init__(self):
        self.now = 1000.0
        self.waits = 0

    def monotonic(self):
        return self.now

    def time(self):
        return time.time()

    def sleep(self, seconds):
        self.waits += 1
        self.now += 0.01


def test_a_writer_killed_mid_write_does_not_hang_the_master(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(slots, "time", clock)
    # Given a worker SIGKILLed between its two sequence stores: the sequence stays odd
    t = SlotTable(1)
    t.reset(0, 0)
    w = SlotWriter(t, 0, 1)
    w.begin("a" * 24, "q", "X", None)
    w.end(True)
    w.begin("b" * 24, "q", "X", None)
    seq = struct.unpack_from("<Q", t.mem, 0)[0]
    struct.pack_into("<Q", t.mem, 0, seq + 1)
    # When the master reads it knowing the worker is gone: one read, no wait
    assert t.read(0, writer_alive=False).pid == 1
    assert clock.waits == 0
    # and a reader that thinks the writer lives waits READ_PATIENCE for it, then gives up
    started = clock.now
    assert t.read(0).pid == 1
    assert clock.waits > 0
    assert clock.now - started == pytest.approx(slots.READ_PATIENCE, abs=0.015)
    # Then the respawn path keeps the counts without waiting, and the new worker's writes
    # read cleanly at once
    waits = clock.waits
    t.reset(0, 2)
    v = t.read(0)
    assert (v.pid, v.processed, v.failed, v.busy) == (2, 1, 1, False)
    w2 = SlotWriter(t, 0, 2)
    w2.begin("c" * 24, "q", "X", None)
    assert t.read(0).jid == "c" * 24
    assert clock.waits == waits


def test_the_table_is_shared_with_a_forked_child():
    t = SlotTable(1)
    pid = os.fork()
    if pid == 0:
        try:
            w = SlotWriter(t, 0, os.getpid())
            w.begin("c" * 24, "q", "Child", None)
            signal.pause()
        finally:
            os._exit(0)
    try:
        wait_for(lambda: t.read(0).pid == pid, what="the child's write")
        v = t.read(0)
        assert (v.pid, v.jid, v.job_class, v.busy) == (pid, "c" * 24, "Child", True)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# --- notes shared by the workers of one master ---------------------------------------------------

def test_notes_are_due_once_per_interval_across_processes():
    import os
    from queued.server.slots import Notes
    notes = Notes(2)
    assert notes.due(0, 60.0, now=1000.0) is True
    pid = os.fork()
    if pid == 0:  # another worker sees the note the first one took
        os._exit(0 if notes.due(0, 60.0, now=1001.0) is False and notes.due(1, 60.0, 1001.0)
                 else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert notes.due(1, 60.0, now=1002.0) is False  # the child's note is seen here
    assert notes.due(0, 60.0, now=1061.0) is True   # a minute later: due again
    assert notes.clear(0) is True and notes.clear(0) is False
    assert notes.due(0, 60.0, now=1062.0) is True


# --- Watch: which queue each idle worker waits on ----------------------------------------------

def test_watch_tells_a_worker_what_the_other_idle_workers_wait_on_across_fork():
    w = slots.Watch(3)
    assert w.others(0) == set()
    w.set(2, 0)
    pid = os.fork()
    if pid == 0:  # a worker in slot 1 waits on queue 4
        w.set(1, 4)
        os._exit(0)
    os.waitpid(pid, 0)
    assert w.others(0) == {0, 4}
    assert w.others(1) == {0}  # its own value is not counted
    w.set(1, None)
    assert w.others(0) == {0}


def test_a_threaded_slot_has_its_process_record_and_one_per_lane():
    t = SlotTable(2, lanes=3)
    assert t.per_slot == 4
    head = SlotWriter(t, 1, 4242)
    lane2 = SlotWriter(t, 1, 4242, record=2)
    head.tick(held=1, lag=2.5, blocker="j" * 24)
    lane2.begin("a" * 24, "default", "Held", 4.0)
    views = t.views()
    assert len(views) == 8 and [v.record for v in views] == [0, 1, 2, 3] * 2
    (busy,) = [v for v in views if v.busy]
    assert (busy.slot, busy.record, busy.jid, busy.timeout) == (1, 2, "a" * 24, 4.0)
    v0 = t.read(1)
    assert (v0.busy, v0.held, v0.lag, v0.jid) == (False, 1, 2.5, "j" * 24)
    # once its job has run and its end is being written, its limit no longer counts
    lane2.ending()
    assert t.read(1, record=2).busy and t.read(1, record=2).timeout == 0.0
    lane2.end(failed=True)
    assert t.processed(1) == 1 and t.slot_views(1)[2].failed == 1
    # a worker of one job at a time in the same table writes record 0 as before
    SlotWriter(t, 0, 77).begin("b" * 24, "q", "X", None, held=3)
    assert (t.read(0).busy, t.read(0).held) == (True, 3)


def test_busy_count_reads_the_state_of_every_record_without_unpacking_them():
    # Given a table of 3 slots of 1,000 lanes: a lane of slot 1 and the lane and the process
    # record of slot 2 busy (the master's idle tick counts these: rt2 finding 8)
    table = SlotTable(3, lanes=1000)
    slots.LaneWriter(table, 1, 11, 7).begin("j1", "q", "C", None, 0, b"q\0tok\0{}")
    slots.LaneWriter(table, 2, 12, 1000).begin("j2", "q", "C", None, 0, b"q\0tok2\0{}")
    SlotWriter(table, 2, 12, 0).begin("j3", "q", "C", None)
    # Then the counts are those of the records read whole, per slot and in all
    assert [table.busy_count(s) for s in range(3)] == [0, 1, 2]
    assert table.busy_count() == 3 == sum(v.busy for v in table.views())
    # And a lane's record names its reservation's token
    assert table.read(1, record=7).token == "tok"
