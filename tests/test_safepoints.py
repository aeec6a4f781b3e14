"""Where a job thread's JobTimeout may land (queued/safepoints.py, server/timeout.LaneTimer):
only in the job's own code, never in a logging lock it holds (issue 17, rt2 finding 2: raised
in logging's Handler.acquire right after the lock was taken, it left the lock held and every
thread of the process hung at its next log line). Real job threads of a real Pool; the
watchdog's call is made by the test at the moment it chooses."""
from __future__ import annotations

import logging
import os
import queue
import threading
import time

import pytest

from queued.errors import JobTimeout
from queued.server import log as logsetup
from queued.server.pool import Pool
from queued.server.slots import SlotTable


class GateLock:
    """A handler's lock that, once ``armed``, stops its taker right after it has taken the real
    lock (inside Handler.acquire, before Handler.handle's ``try``): the very instant where an
    exception raised in the thread leaves the lock held."""

    def __init__(self):
        self.real = threading.RLock()
        self.armed = False
        self.inside = threading.Event()
        self.go = threading.Event()

    def acquire(self, blocking=True, timeout=-1):
        got = self.real.acquire(blocking, timeout)
        if got and self.armed:
            self.armed = False
            self.inside.set()
            self.go.wait(10)
        return got

    def release(self):
        self.real.release()

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exc):
        self.release()

    def _at_fork_reinit(self):
        self.real._at_fork_reinit()

    def __repr__(self):  # (names its owner as an RLock's does)
        return repr(self.real)


class Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


class LogsThenSpins:
    """A fake runner: its one job logs a line, then loops in Python until its JobTimeout."""

    def __init__(self, logger):
        self.logger = logger
        self.seen: list[str] = []

    def run(self, res, msg, lane):
        try:
            with lane.timeout(0.05, "LogsThenSpins (jid x)"):
                self.logger.info("one")
                while True:
                    pass
        except JobTimeout as e:
            self.seen.append(f"JobTimeout: {e}")


@pytest.fixture
def gated():
    logger = logging.getLogger("t.safepoints")
    handler = Kept()
    handler.lock = GateLock()
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, handler
    logger.removeHandler(handler)


def test_a_jobtimeout_due_while_a_job_thread_holds_a_logging_lock_waits_until_it_is_free(gated):
    logger, handler = gated
    runner = LogsThenSpins(logger)
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    pool = Pool(2, runner, SlotTable(1, lanes=2), 0, os.getpid(), inbox)
    lane = pool.take()
    timer = lane.timeout
    # Given a job thread stopped right after taking its log handler's lock
    handler.lock.armed = True
    pool.run_sync(lane, None, {})
    assert handler.lock.inside.wait(10)
    # When its time limit falls due there (the watchdog's call), and the thread goes on
    timer.expire(time.monotonic() + 1)
    handler.lock.go.set()
    # Then the line is written and the lock let go; the JobTimeout lands in the job's own loop
    # (the watchdog tries again at its next tick)
    deadline = time.monotonic() + 10
    while inbox.empty() and time.monotonic() < deadline:
        timer.expire(time.monotonic() + 1)
        time.sleep(0.01)
    assert inbox.get(timeout=1)[:2] == ("done", lane.number)  # (and the job's run time)
    assert runner.seen == ["JobTimeout: LogsThenSpins (jid x) exceeded its 0.05s timeout"]
    assert handler.lines == ["one"]
    # And another thread logs at once: nothing was left holding the lock
    other = threading.Thread(target=logger.info, args=("two",))
    other.start()
    other.join(5)
    assert not other.is_alive() and handler.lines == ["one", "two"]


def test_a_thread_entering_a_guarded_section_with_its_jobtimeout_due_gets_it_there(gated):
    logger, handler = gated

    class LogsInALoop:
        seen: list[str] = []

        def run(self, res, msg, lane):
            try:
                with lane.timeout(0.05, "LogsInALoop (jid y)"):
                    while True:
                        logger.info("tick")
            except JobTimeout as e:
                self.seen.append(str(e))

    runner = LogsInALoop()
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    pool = Pool(2, runner, SlotTable(1, lanes=2), 0, os.getpid(), inbox)
    lane = pool.take()
    # Given a job that does little but log, stopped while it holds the handler's lock
    handler.lock.armed = True
    pool.run_sync(lane, None, {})
    assert handler.lock.inside.wait(10)
    # When its limit falls due there, once
    lane.timeout.expire(time.monotonic() + 1)
    handler.lock.go.set()
    # Then it gets its JobTimeout as it next enters logging (no second call needed), and the
    # lock is free
    assert inbox.get(timeout=10)[:2] == ("done", lane.number)
    assert runner.seen == ["LogsInALoop (jid y) exceeded its 0.05s timeout"]
    assert handler.lock.real.acquire(timeout=5)
    handler.lock.real.release()


def test_write_record_writes_while_another_thread_holds_the_handlers_lock(tmp_path):
    # Given queued's log handler, its lock held for good by another thread (a leaked lock)
    path = tmp_path / "queued.log"
    logsetup.setup("INFO", str(path))
    try:
        handler = logsetup.own_handler()
        held = threading.Event()
        holder = threading.Thread(target=lambda: (handler.acquire(), held.set()), daemon=True)
        holder.start()
        assert held.wait(5)
        # When the watchdog (or TTIN) writes a record
        writer = threading.Thread(target=logsetup.write_record,
                                  args=("ERROR", "queued.worker", "stuck: here is why"))
        writer.start()
        writer.join(5)
        # Then it is written at once, whole (rt2: direct_fd flushed under that lock, and hung)
        assert not writer.is_alive()
        assert path.read_text().endswith("ERROR queued.worker: stuck: here is why\n")
    finally:
        logging.getLogger().handlers.clear()


def test_the_watchdog_names_a_job_thread_stuck_behind_a_logging_lock_and_its_holder(
        gated, monkeypatch):
    from queued.server import watchdog as watchdog_mod
    logger, handler = gated
    release = threading.Event()

    class HoldsOrLogs:
        def run(self, res, msg, lane):
            if msg["hold"]:  # a job that takes the handler's lock and keeps it (a leak)
                handler.acquire()
                try:
                    release.wait(10)
                finally:
                    handler.release()
            else:
                logger.info("blocked")

    inbox: queue.SimpleQueue = queue.SimpleQueue()
    pool = Pool(3, HoldsOrLogs(), SlotTable(1, lanes=3), 0, os.getpid(), inbox)
    dog = watchdog_mod.Watchdog(0, pool, 2.0)
    written: list[str] = []
    monkeypatch.setattr(logsetup, "write_record", lambda level, name, text: written.append(text))
    # Given lane 1 holding the handler's lock, and lane 2 waiting for it
    holder, waiter = pool.take(), pool.take()
    pool.run_sync(holder, None, {"hold": True})
    wait_until(lambda: owner(handler) is not None)
    pool.run_sync(waiter, None, {"hold": False})
    wait_until(lambda: waiter.timeout.waiting is not None)
    # When the watchdog looks past LOOP_STALL, twice
    later = waiter.timeout.waiting[2] + watchdog_mod.LOOP_STALL
    dog._waits(later)
    dog._waits(later + 1)
    release.set()
    # Then it named the waiting lane, the lock and its holder, once
    assert len(written) == 1
    assert written[0].startswith(
        "worker 0: job thread 2 has waited 1.0s for logging's lock (its Kept), held by job "
        "thread 1;")
    assert "release.wait(10)" in written[0]
    assert inbox.get(timeout=5)[:2] == ("done", 1) and inbox.get(timeout=5)[:2] == ("done", 2)
    assert handler.lines == ["blocked"]


def owner(handler):
    from queued import safepoints
    return safepoints.owner_of(handler.lock.real)


def wait_until(check, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_a_limit_due_inside_a_redis_command_is_raised_at_the_next_commands_entry(r):
    import redis as redis_lib
    from queued import safepoints
    from queued.server.timeout import LaneTimer
    # Given a guarded client (as get_redis()'s in a worker of many jobs) and this thread
    # guarded by its lane's timer, its 0.01 s limit past while it is inside a command
    kw = r.connection_pool.connection_kwargs
    client = safepoints.guard_client(redis_lib.Redis(host=kw["host"], port=kw["port"]))
    timer = LaneTimer()
    safepoints.register(timer)
    try:
        with pytest.raises(JobTimeout) as raised:
            with timer(0.01, "Guarded (jid g)"):
                client.set("g", "1")
                while time.monotonic() < timer.deadline:
                    pass
                timer.enter()  # (inside the command: the watchdog's raise is put off)
                assert timer.expire(time.monotonic()) is False and timer.deferred
                timer.leave()
                client.get("g")  # raised here, before a connection is taken
                raise AssertionError("not raised")
        # Then it was the JobTimeout, and no connection was left taken from the pool
        assert str(raised.value) == "Guarded (jid g) exceeded its 0.01s timeout"
        assert not client.connection_pool._in_use_connections
        assert client.get("g") == b"1"
    finally:
        safepoints.register(None)
