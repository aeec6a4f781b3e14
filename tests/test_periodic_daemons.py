"""Periodic jobs with real daemons on a real Redis: three masters pushing an every-second
schedule (one SIGKILLed, one restarted) with each tick pushed exactly once, disable/enable
through queuedctl, and the refusal at boot.

The schedules push to queues no test daemon serves (Tick's "ticks", cronjobs.py's "pyticks"),
so every pushed job stays in its list and the test reads the ticks from the payloads."""
from __future__ import annotations

import json
import statistics

import pytest

from ctlrun import ctl, ctl_json, ok
from harness import Monitor, wait_for

pytestmark = pytest.mark.slow

EVERY_SECOND = {"schedule": {"every_second": {"cron": "* * * * * *", "class": "Tick",
                                              "description": "one a second"}}}


def settings(**extra):
    return {"require": ("cronjobs.py",), "concurrency": 1, "scheduler": EVERY_SECOND, **extra}


def jobs(r, queue: str) -> list[dict]:
    return [json.loads(m) for m in reversed(r.lrange(f"queue:{queue}", 0, -1))]


def ticks(r, queue="ticks", name="every_second") -> list[float]:
    return [j["cron_tick"] for j in jobs(r, queue) if j["cron_name"] == name]


def offers(monitor: Monitor, name: str) -> tuple[float, list[float], dict, list]:
    """What Redis ran for schedule ``name`` (MONITOR): the tick its first cron_sync.lua
    counted as pushed (a schedule does not fire for the tick before it existed; later syncs
    keep what is recorded), and the ticks the masters offered to cron_enqueue.lua, in the
    order Redis ran the offers (KEYS[1] is ``cron_job:<name>``, ARGV[1] the tick); then the
    ticks each connection offered ({"ip:port": [tick, ...]}: a master's), and every command
    Redis ran as (time, connection)."""
    key, seed, offered, by_conn, activity = f"cron_job:{name}", None, [], {}, []
    for at, addr, cmd in monitor.timed():
        if addr.startswith("lua"):
            continue
        activity.append((at, addr))
        parts = cmd.split(" ")
        for i in range(len(parts) - 5):
            if parts[i] == key and parts[i + 1] == "cron_jobs" and seed is None:
                seed = float(parts[i + 4])
            elif parts[i] == key and parts[i + 1] == key + ":enqueued" and parts[i + 5]:
                offered.append(float(parts[i + 5]))  # ('' is a push now: queuedctl)
                by_conn.setdefault(addr, []).append(float(parts[i + 5]))
            else:
                continue
            break
    return seed, offered, by_conn, activity


#: A master that ran a command this early in a tick's second offers that tick, unless it then
#: stalls this long (a loop turn after any command looks at the schedules: periodic.due_in).
RUNNING_MARGIN = 0.5


def assert_each_tick_once(got: list[float], seen: tuple) -> None:
    """No tick pushed twice; every tick a master offered pushed, unless it was no later than
    one recorded before (ticks only move forward: an offer that comes too late loses by
    design, and so does the tick a new schedule starts from), and none that was not offered.
    A tick in between that no master offered is allowed only if every master was stalled
    in its second (a master that runs late offers the latest tick, not the ones it slept
    through; a loaded box makes that): it fails if a master that offered ticks before and
    after it (running, its schedules synced) had Redis run one of its commands (its
    heartbeat every 0.5 s, say) in the first RUNNING_MARGIN of that second, since its next
    turn of the loop would have offered the tick."""
    seed, offered, by_conn, activity = seen
    assert seed is not None, "no cron_sync.lua seen"
    assert len(got) == len(set(got)), f"duplicates: {sorted(got)}"
    highest, owed = seed, set()
    for tick in offered:
        if tick > highest:
            owed.add(tick)
        highest = max(highest, tick)
    assert owed - set(got) == set(), f"offered, not pushed: {sorted(owed - set(got))}"
    assert set(got) - set(offered) == set(), f"pushed, never offered: {set(got) - set(offered)}"
    missed = set(range(int(min(got)), int(max(got)) + 1)) - set(got) if got else set()
    for tick in sorted(missed - set(offered)):
        running = {addr for addr, mine in by_conn.items() if min(mine) < tick < max(mine)}
        ran = sorted((round(at - tick, 3), addr) for at, addr in activity
                     if addr in running and tick <= at < tick + RUNNING_MARGIN)
        assert ran == [], (f"tick {tick} was offered by no master, but {len(ran)} command(s) "
                           f"of running masters ran early in its second (seconds after it, "
                           f"connection; the first 5): {ran[:5]}")
    if missed:
        print(f"\nticks no master offered (every master stalled then): {sorted(missed)}")


def test_three_masters_push_every_tick_once_through_a_kill_and_a_restart(daemon, r, redis_url):
    monitor = Monitor(redis_url)  # from before the first master: every offer is seen
    try:
        three_masters_through_a_kill_and_a_restart(daemon, r, monitor)
    finally:
        monitor.close()


def three_masters_through_a_kill_and_a_restart(daemon, r, monitor: Monitor):
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
    for m in masters[1:]:  # (so what was offered and what was pushed are final)
        assert m.stop() == 0
    # Then every tick the masters offered was pushed exactly once
    got = ticks(r)
    assert_each_tick_once(got, offers(monitor, "every_second"))
    assert len(got) >= 7
    # and so was the schedule declared in Python with @queued.periodic(every="1s")
    assert_each_tick_once(ticks(r, "pyticks", "py_every_second"),
                          offers(monitor, "py_every_second"))
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

