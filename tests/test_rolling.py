"""queued.server.rolling and the spare slot (children.py): which worker is replaced when, with
fork, kill and the clock replaced (the real-process behaviour is in
tests/integration/test_rolling_restart.py)."""
from __future__ import annotations

import itertools
import sys
import signal
import time

import pytest

from queued import config
from queued.server import children as children_mod
from queued.server.master import Master
from queued.server.rolling import Rollout, compare
from queued.server.slots import SlotWriter


@pytest.fixture
def master(redis_url, monkeypatch):
    """``master(**settings)``: a Master whose forks (pids from 1000 up) and kills are
    recorded, never done."""
    pids = itertools.count(1000)
    monkeypatch.setattr(children_mod.os, "fork", lambda: next(pids))

    def make(**settings):
        m = Master(config.from_dict({"redis_url": redis_url, "concurrency": 2, **settings}))
        m.killed = []
        m.children.kill = lambda pid, sig: m.killed.append((pid, sig))
        return m
    return make


def started(m) -> None:
    """Every forked worker writes its pid into its record (what a real worker does first)."""
    for rec in m.workers.values():
        SlotWriter(m.table, rec.slot, rec.pid).tick()


def hup(m) -> None:
    """A HUP, and the loop's turn once its new code has loaded (in a thread: loader.py)."""
    m._hup("SIGHUP")
    if m.loading is not None:
        assert m.loading.join(10)
        m._reloaded()


def slots(m) -> dict[int, int]:
    return {rec.pid: rec.slot for rec in m.workers.values()}


def test_a_master_keeps_a_spare_slot_and_registers_it(master):
    m = master()
    m.children.spawn(set())
    assert sorted(slots(m).values()) == [0, 1] and m.children.free == {2}
    assert m.slots == 3 and m.table.count == 3
    assert '"slots": 3' in m.heartbeat.registration


def test_a_slot_in_boot_backoff_keeps_its_turn_the_spare_is_no_way_round_it(master):
    m = master()
    m.children.spawn(set())
    started(m)
    # Given the worker of slot 0 died at boot (backoff before it is forked again)
    pid = next(p for p, s in slots(m).items() if s == 0)
    rec = m.workers.pop(pid)
    m.children.free.add(0)
    m.children._back_off(rec, 0.1, 1)
    # When the master spawns
    m.children.spawn(set())
    # Then nothing is forked into the spare slot meanwhile
    assert sorted(slots(m).values()) == [1]
    # And once the backoff is over, slot 0 (the one that failed) gets the worker
    m.children.next_spawn[0] = 0.0
    m.children.spawn(set())
    assert sorted(slots(m).values()) == [0, 1]


def test_a_replaced_worker_is_asked_to_stop_once_its_successor_is_up_then_killed_at_the_timeout(
        master, monkeypatch):
    m = master(timeout=5)
    m.children.spawn(set())
    started(m)
    first = dict(slots(m))
    m.rollout.begin(now=100.0)
    assert m.rollout.todo == sorted(first, key=first.get)
    # When the rollout marks the worker of slot 0 as leaving, a successor is forked in the spare
    m.rollout.step(100.0, 5.0)
    leaving = m.rollout.leaving
    assert first[leaving] == 0 and m.workers[leaving].leaving
    m.children.spawn(set())
    successor = (set(slots(m)) - set(first)).pop()
    assert slots(m)[successor] == 2
    # But the leaving one is not asked to stop until the successor has started
    m.rollout.step(100.1, 5.0)
    assert m.killed == []
    started(m)
    m.rollout.step(100.2, 5.0)
    assert m.killed == [(leaving, signal.SIGTERM)] and m.workers[leaving].stop_by == 105.2
    # And if it is still running its job at the shutdown timeout, it is killed
    monkeypatch.setattr(children_mod.time, "monotonic", lambda: 105.3)
    m._murder()
    assert m.killed[-1] == (leaving, signal.SIGKILL)
    assert m.workers[leaving].kill_reason == "replaced"


def test_quiet_abandons_a_rolling_restart_and_its_deadline(master):
    m = master()
    m.children.spawn(set())
    started(m)
    m.rollout.begin(now=time.monotonic())
    m.rollout.step(time.monotonic(), 25.0)
    m.children.spawn(set())
    started(m)
    m.rollout.step(time.monotonic(), 25.0)
    assert any(rec.stop_by for rec in m.workers.values())
    m.quiet()
    assert not m.rollout.active and not any(rec.stop_by for rec in m.workers.values())


def test_compare_names_what_needs_a_restart_and_what_changed():
    old = config.from_dict({"concurrency": 2, "redis_url": "redis://:secret@h:6379/0",
                            "max_retries": 3}, environ={})
    new = config.from_dict({"concurrency": 4, "redis_url": "redis://:other@h2:6379/0",
                            "max_retries": 5, "tag": "blue"}, environ={})
    refused, applied = compare(old, new)
    assert refused == [
        "concurrency (2 -> 4): the worker slots are made at start",
        "redis_url (redis://:****@h:6379/0 -> redis://:****@h2:6379/0): the master and every "
        "worker hold connections to it"]
    assert applied == ["tag '' -> 'blue'", "max_retries 3 -> 5"]
    assert compare(old, old) == ([], [])


def test_a_master_without_job_code_reloads_the_config_only(redis_url):
    calls = []
    cfg = config.from_dict({"redis_url": redis_url, "concurrency": 1}, environ={})
    rollout = Rollout(Master(cfg).children, None, lambda: calls.append(1) or cfg)
    assert rollout.reload(cfg) is cfg and calls == [1]


def test_a_reload_checks_the_new_schedules_and_the_master_takes_them(redis_url, tmp_path,
                                                                     monkeypatch, caplog):
    from queued.server.appcode import AppCode, _Registries
    from queued.job import registry
    saved = _Registries.capture()
    registry.restore({})
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "tickjobs.py").write_text(
        "import queued\n\nclass Tick(queued.Job):\n    def perform(self):\n        pass\n")
    base = {"redis_url": redis_url, "concurrency": 1, "require": ["tickjobs.py"]}
    files = [base, {**base, "scheduler": {"schedule": {"typo": {
        "cron": "* * * * *", "class": "Tikc"}}}}, {**base, "scheduler": {"schedule": {
            "beat": {"every": "30s", "class": "Tick"}}}}]
    try:
        code = AppCode(str(tmp_path))
        code.load(["tickjobs.py"])
        cfg = config.from_dict(files[0], environ={})
        m = Master(cfg, code=code, reread=lambda: config.from_dict(files.pop(0), environ={}))
        files.pop(0)
        assert m.periodic.schedules == []
        # When the new config schedules a class this process does not have, on a queue it
        # serves: refused, nothing changes, the log says why
        hup(m)
        assert "'Tikc' is not a job class of this process" in caplog.text
        assert m.config is cfg and not m.rollout.active and m.periodic.schedules == []
        # When it schedules one it has: the master pushes it from now on
        hup(m)
        assert [s.name for s in m.periodic.schedules] == ["beat"]
        assert m.config.schedules[0].klass == "Tick"
    finally:
        saved.restore()
        sys.modules.pop("tickjobs", None)


GATED_V1 = """
import queued

class Tagger:
    def __call__(self, job_class, msg, queue, call_next):
        msg["tag"] = "v1"
        return call_next()

queued.client_middleware.add(Tagger)

class Gated(queued.Job):
    def perform(self):
        pass
"""
GATED_V2 = """
import gatehold
import queued

gatehold.STARTED.set()
gatehold.GATE.wait(10)  # the import takes as long as the test says

class Gated(queued.Job):  # v2
    def perform(self):
        pass
"""


def test_while_the_new_code_loads_the_loop_reads_the_old_registries_and_forks_nothing(
        master, redis_url, tmp_path, monkeypatch):
    from queued.job import registry
    from queued.middleware import client_middleware
    from queued.server.appcode import AppCode, _Registries
    from queued.server.loader import LIVE
    saved = _Registries.capture()
    registry.restore({})
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "gatehold.py").write_text(
        "import threading\nSTARTED, GATE = threading.Event(), threading.Event()\n")
    import gatehold
    code_file = tmp_path / "gatedjobs.py"
    code_file.write_text(GATED_V1)
    try:
        # Given a master running v1 (a class and a client middleware), its workers forked
        code = AppCode(str(tmp_path))
        code.load([str(code_file)])
        old_class = registry.lookup("Gated")
        cfg = config.from_dict({"redis_url": redis_url, "concurrency": 2,
                                "require": [str(code_file)]}, environ={})
        m = Master(cfg, code=code, reread=lambda: cfg)
        m._spawn()
        started(m)
        assert len(m.workers) == 2
        # When a HUP brings v2, whose import is still going on (held at the gate)
        code_file.write_text(GATED_V2 + "\n")
        m._hup("SIGHUP")
        assert gatehold.STARTED.wait(10) and m.loading is not None and not m.loading.done
        # Then the loop's parts read what v1 registered, though the registries are the
        # loader's (emptied, being filled again)
        assert registry.lookup("Gated") is None and len(client_middleware) == 0
        assert m.app.lookup("Gated") is old_class
        assert [c.__name__ for c in m.scheduler.chain] == ["Tagger"]
        assert [c.__name__ for c in m.periodic.chain] == ["Tagger"]
        assert m.exits.app is m.app
        # And nothing is forked meanwhile: a worker gone is not replaced yet
        gone = m.workers.pop(next(iter(m.workers)))  # (as reaped)
        m.children.free.add(gone.slot)
        forked_before = set(m.workers)
        m._spawn()
        assert set(m.workers) == forked_before
        # When the import ends, the next turn applies v2 and forks again
        gatehold.GATE.set()
        assert m.loading.join(10)
        m._reloaded()
        assert m.loading is None and m.app is LIVE and m.scheduler.chain is client_middleware
        assert registry.lookup("Gated") is not old_class and len(client_middleware) == 0
        assert m.rollout.active
        m._spawn()
        assert len(m.workers) > len(forked_before)
    finally:
        gatehold.GATE.set()
        saved.restore()
        sys.modules.pop("gatedjobs", None)
        sys.modules.pop("gatehold", None)
