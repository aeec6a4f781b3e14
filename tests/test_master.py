"""queued.server.master: the loop's steps called directly, with fork, kill and the clocks replaced.

STYLE.md's advice (gunicorn's test_arbiter.py): test the arbiter's decisions by mocking
``fork``, ``kill`` and ``waitpid``; the real-process behaviour is in tests/integration.
"""
from __future__ import annotations

import signal
import time

import pytest

from queued import config
from queued.server import children as children_mod, master as master_mod
from queued.server.children import WorkerRecord
from queued.server.master import Master
from queued.server.running import Running
from queued.server.slots import SlotWriter


def make(redis_url, **settings) -> Master:
    m = Master(config.from_dict({"redis_url": redis_url, "concurrency": 2, **settings}))
    m.killed = []
    m.children.kill = lambda pid, sig: m.killed.append((pid, sig))
    return m


def adopt(m: Master, slot: int, pid: int, spawned_ago: float = 0.0) -> SlotWriter:
    """A worker record as _fork leaves it, and the worker's writer on its slot."""
    rec = WorkerRecord(slot, pid)
    rec.spawned -= spawned_ago
    m.children.workers[pid] = rec
    m.children.free.discard(slot)
    return SlotWriter(m.table, slot, pid)


def test_fork_leaves_the_childs_first_record_alone(redis_url, monkeypatch):
    # Given a child that begins a job before its parent returns from fork() (the kernel may
    # run either first)
    m = make(redis_url)

    def fork():
        SlotWriter(m.table, 0, 4321).begin("a" * 24, "default", "Busy", 30.0)
        return 4321

    monkeypatch.setattr(children_mod.os, "fork", fork)
    # When the master forks slot 0
    m.children.fork(0)
    # Then the table still shows the child's job: the master wrote the record before the
    # fork, not after (a reset after it hid the job from timeouts, heartbeat and crash count)
    v = m.table.read(0)
    assert (v.busy, v.pid, v.jid, v.job_class) == (True, 4321, "a" * 24, "Busy")
    assert m.workers[4321].slot == 0 and 0 not in m.children.free


def test_a_job_timeout_is_measured_on_the_monotonic_clock(redis_url, monkeypatch):
    # Given a worker 1 s into a job with a 10 s timeout
    m = make(redis_url, timeout_grace=1)
    w = adopt(m, 0, 111)
    w.begin("b" * 24, "default", "Slow", 10.0)
    # When the wall clock steps an hour ahead (NTP), and the master checks its workers
    monkeypatch.setattr(children_mod.time, "time", lambda real=time.time: real() + 3600)
    m._murder()
    # Then nobody is killed: only the monotonic clock counts
    assert m.killed == []
    # But past timeout + grace on the monotonic clock, the worker is first asked for its
    # stack (TTIN: it logs where the job is), then killed STACK_WAIT later
    now = time.monotonic()
    monkeypatch.setattr(children_mod.time, "monotonic", lambda: now + 11.5)
    m._murder()
    assert m.killed == [(111, signal.SIGTTIN)]
    assert m.workers[111].kill_reason == "timeout"
    m._murder()
    assert m.killed == [(111, signal.SIGTTIN)]
    monkeypatch.setattr(children_mod.time, "monotonic",
                        lambda: now + 11.5 + children_mod.STACK_WAIT)
    m._murder()
    assert m.killed == [(111, signal.SIGTTIN), (111, signal.SIGKILL)]


@pytest.mark.parametrize("fetch_timeout,silent_for,killed", [
    (2.0, 30.0, False), (2.0, 63.0, True), (120.0, 90.0, False), (120.0, 185.0, True)])
def test_an_idle_worker_is_silent_only_beyond_its_blocking_fetch(
        redis_url, monkeypatch, fetch_timeout, silent_for, killed):
    # Given an idle worker that ticked before a blocking fetch of up to fetch_timeout
    m = make(redis_url, fetch_timeout=fetch_timeout)
    w = adopt(m, 0, 222, spawned_ago=1000)
    w.tick()
    # When the master looks at it silent_for seconds later
    now = time.monotonic()
    monkeypatch.setattr(children_mod.time, "monotonic", lambda: now + silent_for)
    m._murder()
    # Then it is killed only past fetch_timeout + SILENT_LIMIT (a fixed 60 s killed the idle
    # workers of a daemon with a 120 s fetch_timeout every minute)
    assert m.killed == ([(222, signal.SIGKILL)] if killed else [])


@pytest.mark.parametrize("code,busy,reason", [
    (0, False, "exit"), (0, True, "crash"), (1, False, "crash"), (-9, True, "crash")])
def test_a_worker_that_exits_while_busy_crashed_whatever_its_status(
        redis_url, monkeypatch, code, busy, reason):
    # Given a worker whose slot says it is (or is not) running a job
    m = make(redis_url)
    w = adopt(m, 1, 333, spawned_ago=10)
    if busy:
        w.begin("c" * 24, "default", "Exits", None)
    # When it exits with that status (os._exit(0) inside a job exits 0)
    ended = m.children.exited(m.workers.pop(333), _status(code))
    # Then an exit in the middle of a job is a crash (charged to the job), a plain exit 0
    # between jobs is not
    assert ended == (1, code, reason, (Running("c" * 24),) if busy else (), {}, False)


def _status(code: int) -> int:
    """A waitpid status for an exit code (>= 0) or a signal (< 0)."""
    return -code if code < 0 else code << 8


@pytest.fixture
def own_signals():
    """Master.run() installs the master's handlers and wakeup fd in this process: put the
    test process's own back afterwards."""
    saved = {sig: signal.getsignal(sig) for sig in master_mod.SIGNALS}
    yield
    signal.set_wakeup_fd(-1)
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_term_before_the_handlers_existed_stops_the_master(redis_url, own_signals):
    # Given a TERM that arrived while the job code was loading (cli.main records it)
    m = make(redis_url)
    m.early_signals.append(signal.SIGTERM)
    forked = []
    m.children.fork = forked.append
    # When the master runs
    status = m.run()
    # Then it stops at once and cleanly: no worker forked, exit 0, nothing left registered
    assert (status, forked, m.state) == (0, [], "stopping")
    assert m.r.hlen(m.keys.masters) == 0 and not m.r.exists(m.keys.lease(m.identity))


def test_waiting_for_redis_at_boot_is_said_at_growing_intervals_and_in_the_title(
        redis_url, monkeypatch, caplog):
    import logging
    m = make(redis_url)
    shown = []
    monkeypatch.setattr(master_mod.titles, "set_title", shown.append)
    clock = [1000.0]
    monkeypatch.setattr(master_mod.time, "monotonic", lambda: clock[0])
    reports = list(master_mod.WAITING_REPORTS)
    said = []
    with caplog.at_level(logging.ERROR, logger="queued.master"):
        for t in range(0, 200):  # a failed attempt every second for 200 s
            clock[0] = 1000.0 + t
            before = len(caplog.records)
            m._still_waiting(OSError("refused"), reports)
            if len(caplog.records) > before:
                said.append(t)
    assert said == [10, 30, 60, 120, 180]
    assert caplog.records[0].getMessage() == "still waiting for Redis after 10s (refused)"
    assert shown and all(x.endswith("waiting for Redis") for x in shown)
    assert len(shown) == 1  # set once: the text did not change


def test_retry_describe_says_the_attempt_the_limit_and_when():
    import time as _time
    from queued.server import retry
    now = _time.time()
    out = retry.decide({"class": "X", "args": [], "jid": "j", "retry": 5},
                       RuntimeError("x"), "default", now=now)
    when = _time.strftime("%Y-%m-%d %H:%M:%S", _time.gmtime(out.score))
    today = _time.strftime("%Y-%m-%d", _time.gmtime())
    assert retry.describe(out) == "retry 1/5 at " + (
        when[11:] if when.startswith(today) else when) + "Z"
    out = retry.decide({"class": "X", "args": [], "jid": "j", "retry": True,
                        "retry_count": 24}, RuntimeError("x"), "default", now=now)
    assert retry.describe(out, 25) == "dead"
    out = retry.decide({"class": "X", "args": [], "jid": "j", "retry": False},
                       RuntimeError("x"), "default", now=now)
    assert retry.describe(out) == "dropped (retry: false)"
