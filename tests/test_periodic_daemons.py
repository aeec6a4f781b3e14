"""Periodic jobs with real daemons on a real Redis: three masters pushing an every-second
schedule (one SIGKILLed, one restarted) with each tick pushed exactly once, disable/enable
through queuedctl, and the refusal at boot.

The schedules push to queues no test daemon serves (Tick's "ticks", cronjobs.py's "pyticks"),
so every pushed job stays in its list and the test reads the ticks from the payloads."""
from __future__ import annotations

import json
import signal
import statistics
import time

import pytest

from ctlrun import ctl, ctl_json, ok
from harness import wait_for

pytestmark = pytest.mark.slow

EVERY_SECOND = {"schedule": {"every_second": {"cron": "* * * * * *", "class": "Tick",
                                              "description": "one a second"}}}


def settings(**extra):
    return {"require": ("cronjobs.py",), "concurrency": 1, "scheduler": EVERY_SECOND, **extra}


def jobs(r, queue: str) -> list[dict]:
    return [json.loads(m) for m in reversed(r.lrange(f"queue:{queue}", 0, -1))]


def ticks(r, queue="ticks", name="every_second") -> list[float]:
    return [j["cron_tick"] for j in jobs(r, queue) if j["cron_name"] == name]


def assert_each_tick_once(got: list[float]) -> None:
    """Every tick from the first to the last, each exactly once (no gap, no duplicate)."""
    assert len(got) == len(set(got)), f"duplicates: {sorted(got)}"
    want = [got[0] + i for i in range(int(got[-1] - got[0]) + 1)] if got else []
    assert sorted(got) == want, f"gaps: {sorted(set(want) - set(got))}"


def test_three_masters_push_every_tick_once_through_a_kill_and_a_restart(daemon, r):
    # Given three masters with the same every-second schedule
    masters = [daemon(**settings()) for _ in range(3)]
    wait_for(lambda: len(ticks(r)) >= 2, 10, what="the first ticks")
    # When one is SIGKILLed (master and workers) mid-run ...
    masters[0].kill_all()
    killed_at = ticks(r)[-1]
    wait_for(lambda: ticks(r)[-1] >= killed_at + 2, 10, what="ticks after the kill")
    # ... and another is stopped and started again at once (a restart within a tick or two)
    masters[1].stop()
    masters[1] = daemon(**settings())
    restarted_at = ticks(r)[-1]
    wait_for(lambda: ticks(r)[-1] >= restarted_at + 3, 10, what="ticks after the restart")
    # Then every tick from the first to the last was pushed exactly once
    got = ticks(r)
    assert_each_tick_once(got)
    assert len(got) >= 7
    # and so was the schedule declared in Python with @queued.periodic(every="1s")
    assert_each_tick_once(ticks(r, "pyticks", "py_every_second"))
    late = sorted(j["enqueued_at"] - j["cron_tick"] for j in jobs(r, "ticks"))
    print(f"\nperiodic lateness over {len(late)} ticks, 3 masters: median "
          f"{statistics.median(late) * 1000:.1f} ms, max {late[-1] * 1000:.1f} ms")
    # The pushed jobs are Sidekiq's format
    job = jobs(r, "ticks")[-1]
    assert list(job) == ["retry", "queue", "class", "args", "cron_name", "cron_tick", "jid",
                         "created_at", "enqueued_at"]
    assert (job["class"], job["queue"], job["args"], job["retry"]) == ("Tick", "ticks", [], True)


def test_disable_and_enable_through_queuedctl(daemon, r, redis_url):
    daemon(**settings())
    wait_for(lambda: len(ticks(r)) >= 2, 10, what="the first ticks")
    listed = {row["name"]: row for row in ctl_json("cron", url=redis_url)}
    assert listed["every_second"]["status"] == "enabled"
    assert listed["every_second"]["class"] == "Tick" and listed["every_second"]["queue"] == "ticks"
    assert listed["every_second"]["next_run"] > listed["every_second"]["last_run"]
    assert listed["py_every_second"]["defined_by"] == "@queued.periodic on cronjobs.PyTick"
    # When the operator disables it
    assert "every_second disabled" in ok("cron", "disable", "every_second", url=redis_url)
    before = set(ticks(r))
    py = ticks(r, "pyticks", "py_every_second")[-1]
    # Then three more ticks of the other schedule pass with none of this one
    wait_for(lambda: ticks(r, "pyticks", "py_every_second")[-1] >= py + 3, 10,
             what="three ticks of py_every_second")
    assert set(ticks(r)) - before == set()
    listed = {row["name"]: row for row in ctl_json("cron", url=redis_url)}
    assert (listed["every_second"]["status"], listed["every_second"]["next_run"]) == (
        "disabled", None)
    # And enabled again it is pushed from its next tick on
    ok("cron", "enable", "every_second", url=redis_url)
    wait_for(lambda: len(set(ticks(r)) - before) >= 2, 10, what="ticks after enable")
    # enqueue pushes one now, whatever its status
    pushed = ctl_json("cron", "enqueue", "every_second", url=redis_url)
    assert any(j["jid"] == pushed["jid"] and "cron_tick" not in j for j in jobs(r, "ticks"))
    proc = ctl("cron", "disable", "nope", url=redis_url)
    assert (proc.returncode, proc.stderr) == (
        1, "queuedctl: no periodic job named 'nope' (queuedctl cron lists them)\n")


def test_a_schedule_of_a_class_nobody_here_serves_is_refused_at_boot(daemon, r):
    # Given a schedule naming a class the job code does not define, on a queue this serves
    d = daemon(wait=False, **settings(scheduler={"schedule": {
        "typo": {"every": "1m", "class": "Tik", "queue": "default"}}}))
    # Then queued refuses to start, naming the file and the key, with the config error status
    assert d.wait(30) == 2
    assert (f"queued: {d.config}: scheduler.schedule.typo.class: 'Tik' is not a job class of "
            "this process") in d.output()
    assert r.scard("cron_jobs") == 0


def test_a_master_frozen_across_ticks_pushes_each_of_them_late(daemon, r):
    # Given one master with an every-second schedule
    d = daemon(**settings())
    wait_for(lambda: len(ticks(r)) >= 2, 10, what="the first ticks")
    # When it is frozen (SIGSTOP: a stalled host, a loaded box) across three ticks
    d.signal(signal.SIGSTOP)
    frozen_at = time.time()
    time.sleep(3.5)  # (not a wait for something: the time it stays frozen)
    d.signal(signal.SIGCONT)
    # Then once it runs again it pushes each tick it missed, late (docs/periodic.md: "a tick is
    # pushed late, up to 60 s after its time"), not only the latest one
    wait_for(lambda: ticks(r)[-1] >= frozen_at + 4, 10, what="ticks after the thaw")
    assert_each_tick_once(ticks(r))
