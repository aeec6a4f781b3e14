"""Periodic jobs in-process: tick arithmetic (zones, DST, seconds, every:) with an injected
clock, and server/periodic.Periodic against a real Redis, several instances standing for
several masters."""
from __future__ import annotations

import datetime as dt
import json
from zoneinfo import ZoneInfo

import pytest

import queued
from queued import config as config_mod
from queued.keys import Keys
from queued.cronspec import parse_cron, parse_every
from queued.values import Invalid
from queued.periodic import declared
from queued.server import periodic as server_periodic
from queued.server.periodic import LATE_LIMIT, Periodic

BERLIN = ZoneInfo("Europe/Berlin")
NO_ENV: dict = {}


def at(*args, tz=BERLIN) -> float:
    return dt.datetime(*args, tzinfo=tz).timestamp()


def local(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, BERLIN).isoformat()


def ticks(timing, start: float, end: float) -> list[str]:
    out, t = [], start
    while True:
        t = timing.next_after(t)
        if t > end:
            return out
        out.append(local(t))


# --- tick arithmetic ---------------------------------------------------------------------------

def test_spring_forward_a_0230_job_runs_once_at_the_jump():
    # Given a daily 02:30 Berlin job, over the night 02:00 -> 03:00 (2024-03-31)
    timing = parse_cron("30 2 * * * Europe/Berlin")
    # Then it runs at 03:00 CEST that night (02:30 does not exist), once, and at 02:30 after
    assert ticks(timing, at(2024, 3, 30, 12), at(2024, 4, 1, 12)) == [
        "2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00"]


def test_fall_back_a_0230_job_runs_once():
    # Given a daily 02:30 Berlin job, over the night 03:00 -> 02:00 (2024-10-27)
    timing = parse_cron("30 2 * * * Europe/Berlin")
    # Then 02:30 comes twice on the clock, and the job runs at the first only
    assert ticks(timing, at(2024, 10, 26, 12), at(2024, 10, 28, 12)) == [
        "2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00"]
    # and the latest tick seen from after the second 02:30 is the first one
    assert local(timing.latest(at(2024, 10, 27, 2, 45, tz=dt.timezone(dt.timedelta(hours=1))))
                 ) == "2024-10-27T02:30:00+02:00"


def test_fall_back_an_hourly_job_runs_in_both_hours():
    # A *-hour job is about elapsed time: both 02:00s run (Debian cron's rule)
    timing = parse_cron("0 * * * * Europe/Berlin")
    assert ticks(timing, at(2024, 10, 27, 1, 30), at(2024, 10, 27, 3, 30)) == [
        "2024-10-27T02:00:00+02:00", "2024-10-27T02:00:00+01:00", "2024-10-27T03:00:00+01:00"]


def test_a_zone_moves_the_tick_and_no_zone_is_utc():
    berlin, utc = parse_cron("0 9 * * * Europe/Berlin"), parse_cron("0 9 * * *")
    start = at(2024, 7, 1, 0, tz=dt.timezone.utc)
    assert berlin.next_after(start) == at(2024, 7, 1, 7, tz=dt.timezone.utc)  # CEST, UTC+2
    assert utc.next_after(start) == at(2024, 7, 1, 9, tz=dt.timezone.utc)


def test_six_fields_put_seconds_first_and_latest_includes_now():
    timing = parse_cron("*/15 * * * * *")
    t = at(2024, 1, 1, 12, 0, 0, tz=dt.timezone.utc)
    assert timing.latest(t) == t and timing.latest(t + 14.9) == t
    assert timing.next_after(t) == t + 15 and timing.next_after(t + 0.5) == t + 15


def test_every_ticks_at_multiples_of_the_interval_since_the_epoch():
    timing = parse_every("1h30m")
    assert timing.seconds == 5400
    assert timing.latest(5400 * 1000 + 7) == 5400 * 1000
    assert timing.next_after(5400 * 1000) == 5400 * 1001
    assert parse_every("30s").cron_text() == "*/30 * * * * *"
    assert parse_every("5m").cron_text() == "0 */5 * * * *"
    assert parse_every("7m").cron_text() == "every 7m"


# --- Periodic: several masters on one Redis, an injected clock --------------------------------

class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def cfg(**entry):
    entry = {"cron": "* * * * * *", "class": "Beat", "queue": "beats", **entry}
    return config_mod.from_dict({"scheduler": {"schedule": {"beat": entry}}}, environ=NO_ENV)


def master(r, config, clock) -> Periodic:
    return Periodic(r, Keys(), config, clock=clock)


def pushed(r, queue="beats") -> list[float]:
    """The ticks of the jobs in ``queue``, oldest first."""
    return [json.loads(m)["cron_tick"] for m in reversed(r.lrange(f"queue:{queue}", 0, -1))]


def run(masters, clock, start: float, seconds: int, step: float = 0.25) -> None:
    """Every master looks at every step, as their loops would."""
    for i in range(int(seconds / step) + 1):
        clock.now = start + i * step
        for m in masters:
            m.tick()


def test_three_masters_push_each_tick_exactly_once(r):
    clock = Clock(1_700_000_000.5)
    config = cfg()
    masters = [master(r, config, clock) for _ in range(3)]
    run(masters, clock, 1_700_000_000.5, 10)
    # a new schedule does not fire for the tick before it existed (...000); then every one
    assert pushed(r) == [1_700_000_000.0 + i for i in range(1, 11)]


def test_a_master_restarted_within_a_tick_does_not_push_it_again(r):
    clock = Clock(1_700_000_010.0)
    config = cfg()
    first = master(r, config, clock)
    run([first], clock, 1_700_000_010.0, 2)
    before = pushed(r)
    # the restarted master looks at the same tick right away (it is within LATE_LIMIT)
    clock.now = 1_700_000_012.3
    master(r, config, clock).tick()
    assert pushed(r) == before == [1_700_000_011.0, 1_700_000_012.0]


def test_a_tick_missed_by_every_master_is_not_replayed_unless_catch_up(r):
    def utc(*args):
        return at(2024, 1, 1, *args, tz=dt.timezone.utc)

    # Given an hourly job that ran at 12:00, then no master until 14:00:30
    clock = Clock(utc(11, 59, 59) + 0.5)
    config = cfg(cron="0 0 * * * *")
    run([master(r, config, clock)], clock, clock.now, 1)
    assert pushed(r) == [utc(12)]
    # Then a master starting at 14:00:30 skips 13:00 and pushes 14:00 (late, within the limit)
    clock.now = utc(14, 0, 30)
    master(r, config, clock).tick()
    assert pushed(r) == [utc(12), utc(14)]
    # And one starting at 15:05, past LATE_LIMIT, pushes nothing ...
    clock.now = utc(15, 0, 0) + LATE_LIMIT + 240
    master(r, config, clock).tick()
    assert pushed(r) == [utc(12), utc(14)]
    # ... but with catch_up the latest missed tick (one job) is pushed
    master(r, cfg(cron="0 0 * * * *", catch_up=True), clock).tick()
    assert pushed(r) == [utc(12), utc(14), utc(15)]


def test_a_disabled_schedule_is_skipped_and_the_operators_status_survives_a_restart(r):
    clock = Clock(1_700_000_100.5)
    config = cfg()
    run([master(r, config, clock)], clock, clock.now, 1)
    r.hset("cron_job:beat", "status", "disabled")  # what queuedctl cron disable writes
    run([master(r, config, clock)], clock, clock.now, 3)  # a restart: sync keeps "disabled"
    assert pushed(r) == [1_700_000_101.0]
    assert r.hget("cron_job:beat", "status") == b"disabled"
    # A deploy whose file now says enabled: false, then true again: the file's change wins
    master(r, cfg(enabled=False), clock).tick()
    run([master(r, config, clock)], clock, clock.now, 2)
    assert r.hget("cron_job:beat", "status") == b"enabled"
    assert pushed(r) == [1_700_000_101.0, 1_700_000_104.0, 1_700_000_105.0, 1_700_000_106.0]


def test_the_hash_is_sidekiq_crons_and_the_job_a_sidekiq_job(r):
    clock = Clock(1_700_000_200.5)
    run([master(r, cfg(args=["a", 1], description="beat it"), clock)], clock, clock.now, 1)
    assert r.smembers("cron_jobs") == {b"cron_job:beat"}
    h = {k.decode(): v.decode() for k, v in r.hgetall("cron_job:beat").items()}
    assert {k: h[k] for k in ("name", "klass", "cron", "description", "args", "status")} == {
        "name": "beat", "klass": "Beat", "cron": "* * * * * *", "description": "beat it",
        "args": '["a",1]', "status": "enabled"}
    assert json.loads(h["message"]) == {"retry": True, "queue": "beats", "class": "Beat",
                                        "args": ["a", 1]}
    assert h["last_enqueue_time"] == "2023-11-14 22:16:41 +0000"
    (job,) = [json.loads(m) for m in r.lrange("queue:beats", 0, -1)]
    assert list(job) == ["retry", "queue", "class", "args", "cron_name", "cron_tick", "jid",
                         "created_at", "enqueued_at"]
    assert job["enqueued_at"] == job["created_at"] and job["cron_tick"] == 1_700_000_201.0
    assert r.smembers("queues") == {b"beats"}
    assert r.zrange("cron_job:beat:enqueued", 0, -1) == [b"2023-11-14T22:16:41Z"]
    assert json.loads(r.lindex("cron_job:beat:jid_history", 0))["jid"] == job["jid"]


def test_a_ruby_sidekiq_cron_poller_that_took_the_tick_is_respected(r):
    # sidekiq-cron marks a tick it pushed by ZADD of its ISO time; queued reads the same set
    clock = Clock(1_700_000_300.5)
    m = master(r, cfg(), clock)
    m.tick()
    r.zadd("cron_job:beat:enqueued", {"2023-11-14T22:18:21Z": 1_700_000_301.0})  # its :01
    run([m], clock, 1_700_000_300.5, 2)
    assert pushed(r) == [1_700_000_302.0]


# --- a master whose clock is wrong (issue 16.1.6) ---------------------------------------------

def drive(masters, until, timeout=20.0) -> None:
    """Every master looks again and again, as their loops would (real time: the ticks are
    judged against Redis's clock), until ``until()``."""
    from harness import wait_for
    wait_for(lambda: [m.tick() for m in masters] and until(), timeout, interval=0.02,
             what="the pushes")


def contiguous(ticks: list[float]) -> bool:
    return ticks == [ticks[0] + i for i in range(len(ticks))]


def test_a_master_ten_minutes_fast_then_corrected_leaves_no_gap(r, caplog):
    # Given the only master, its host's clock 10 minutes fast (and a correct clock to judge)
    import socket
    import time
    skew = {"fast": 600.0}
    fast = master(r, cfg(), lambda: time.time() + skew["fast"])
    # When it runs: then it pushes the ticks of the true time, none ten minutes ahead (it
    # claimed them, and after the correction no master pushed for ten minutes), and says
    # once which host's clock is wrong
    drive([fast], lambda: len(pushed(r)) >= 3)
    assert all(t <= time.time() + 1 for t in pushed(r)), pushed(r)
    warnings = [x for x in caplog.records if "clock" in x.getMessage()]
    assert len(warnings) == 1 and socket.gethostname() in warnings[0].getMessage()
    assert "600" in warnings[0].getMessage() or "599" in warnings[0].getMessage()
    # When its clock is corrected, and a second master with a good clock joins
    skew["fast"] = 0.0
    good = master(r, cfg(), time.time)
    seen = len(pushed(r))
    drive([fast, good], lambda: len(pushed(r)) >= seen + 3)
    # Then every tick from the first on was pushed once: no gap, no tick twice
    assert contiguous(pushed(r)), pushed(r)
    assert pushed(r)[-1] <= time.time() + 1


def test_a_last_tick_recorded_ahead_of_redis_does_not_stop_the_pushes(r):
    # Given a schedule whose last tick was claimed 10 minutes ahead (a fast master of an
    # older version, before this one)
    import time
    good = master(r, cfg(), time.time)
    good.tick()
    r.hset("cron_job:beat", "queued_last_tick", repr(time.time() + 600))
    # Then a master with a good clock pushes the ticks of now anyway
    drive([good], lambda: len(pushed(r)) >= 2)
    assert contiguous(pushed(r)) and pushed(r)[-1] <= time.time() + 1


# --- through client middleware, an outage, a wrong-type queue, a failing schedule ---------------

def two(**extra):
    return config_mod.from_dict({"scheduler": {"schedule": {
        "beat": {"cron": "* * * * * *", "class": "Beat", "queue": "beats"},
        "skip": {"cron": "* * * * * *", "class": "Skip", "queue": "skips"}, **extra}}},
        environ=NO_ENV)


def test_periodic_jobs_go_through_client_middleware_which_may_change_or_cancel_them(r):
    from queued.middleware import client_middleware

    class Tag:
        def __call__(self, job_class, msg, queue, call_next):
            if msg["cron_name"] == "skip":
                return None  # cancelled, as a push's middleware may
            msg["tags"] = ["cron", job_class]
            return call_next()

    saved = client_middleware.snapshot()
    client_middleware.add(Tag)
    try:
        clock = Clock(1_700_000_400.5)
        run([master(r, two(), clock)], clock, clock.now, 2)
    finally:
        client_middleware.restore(saved)
    # Then the pushed jobs carry what the middleware added, and the cancelled one is not
    # pushed at all (nor recorded as pushed)
    jobs = [json.loads(m) for m in reversed(r.lrange("queue:beats", 0, -1))]
    assert [j["cron_tick"] for j in jobs] == [1_700_000_401.0, 1_700_000_402.0]
    assert all(j["tags"] == ["cron", "Beat"] for j in jobs)
    assert r.llen("queue:skips") == 0 and r.hget("cron_job:skip", "last_enqueue_time") is None


def test_periodic_jobs_through_a_redis_outage_push_the_tick_due_when_it_is_back(tmp_path):
    import redis as redis_lib
    from faults.common import OwnRedis
    server = OwnRedis()
    server.start()
    r = redis_lib.Redis.from_url(server.url, socket_timeout=1)
    try:
        clock = Clock(1_700_000_500.5)
        m = master(r, cfg(), clock)
        run([m], clock, clock.now, 1)
        assert pushed(r) == [1_700_000_501.0]
        # When Redis goes away: the tick fails with a Redis error (the master logs the outage
        # once and backs off: server/periodic.RETRY)
        server.shutdown()
        clock.now = 1_700_000_503.2
        with pytest.raises(redis_lib.ConnectionError):
            m.tick()
        m.backoff()
        clock.now += 0.5
        m.tick()  # (within the backoff: not even tried)
        # When it is back, the tick due then is pushed, once (the ticks missed while it was
        # away are not replayed: catch_up is off)
        server.start()
        clock.now = 1_700_000_505.3
        m.tick()
        m.tick()
        assert pushed(r) == [1_700_000_501.0, 1_700_000_505.0]
    finally:
        r.close()
        server.stop()


def test_a_wrong_type_queue_key_holds_its_ticks_back_and_nothing_else(r, caplog):
    clock = Clock(1_700_000_600.5)
    m = master(r, two(), clock)
    run([m], clock, clock.now, 1)
    # When the beats queue key is overwritten with a string
    r.set("queue:beats", "oops")
    run([m], clock, clock.now, 2)
    # Then its ticks are not pushed (nor claimed), the other schedule's are, and it is said
    assert r.get("queue:beats") == b"oops"
    assert [json.loads(x)["cron_tick"] for x in reversed(r.lrange("queue:skips", 0, -1))] == [
        1_700_000_601.0, 1_700_000_602.0, 1_700_000_603.0]
    assert "queue key queue:beats holds another Redis type" in caplog.text
    assert float(r.hget("cron_job:beat", "queued_last_tick")) == 1_700_000_601.0
    # And once it is fixed, the next tick is pushed
    r.delete("queue:beats")
    run([m], clock, clock.now, 1)
    assert pushed(r) == [1_700_000_604.0]


def test_a_schedule_that_fails_with_a_non_redis_error_stops_no_other(r, caplog, monkeypatch):
    # Given one schedule whose job cannot be made (an error in queued or the job code) and a
    # client middleware that raises on the other's
    from queued.middleware import client_middleware
    real = server_periodic.stamp

    def stamp(template, name, *args, **kwargs):
        if name == "skip":
            raise RuntimeError("cannot make this job")
        return real(template, name, *args, **kwargs)
    monkeypatch.setattr(server_periodic, "stamp", stamp)

    class Broken:
        def __call__(self, job_class, msg, queue, call_next):
            raise ValueError("middleware bug")

    saved = client_middleware.snapshot()
    client_middleware.add(Broken)
    try:
        clock = Clock(1_700_000_700.5)
        run([master(r, two(), clock)], clock, clock.now, 2)  # (never raises to the loop)
    finally:
        client_middleware.restore(saved)
    # Then the schedule the middleware failed on is pushed as it was, every tick; the other
    # is logged every tick and pushes nothing (three offers each: the tick before the
    # schedules existed is offered too, and not pushed)
    assert pushed(r) == [1_700_000_701.0, 1_700_000_702.0]
    assert caplog.text.count("client middleware raised on periodic job beat") == 3
    assert caplog.text.count("schedule skip: its tick could not be pushed") == 3
    assert r.llen("queue:skips") == 0


# --- which schedules, and the refusal at boot ----------------------------------------------------

@pytest.fixture
def python_schedules():
    saved = dict(declared)
    yield declared
    declared.clear()
    declared.update(saved)


def test_periodic_decorator_on_a_job_class_and_a_function(python_schedules):
    @queued.periodic("*/5 * * * *", queue="low", args=[1])
    class Report(queued.Job):
        def perform(self, n):
            pass

    @queued.periodic(every="10m", name="sweep")
    @queued.job(queue="maint")
    def sweeper():
        pass

    config = config_mod.from_dict({"queues": ["low"]}, environ=NO_ENV)
    by_name = {s.name: s for s in server_periodic.schedules_for(config)}
    assert by_name["Report"].klass == "Report" and by_name["Report"].args == (1,)
    assert server_periodic.queue_of(by_name["sweep"]) == "maint"
    server_periodic.check(config)  # both classes are registered: fine
    with pytest.raises(ValueError, match="not a valid cron expression"):
        queued.periodic("61 * * * *")
    with pytest.raises(TypeError, match="queued.Job subclass"):
        queued.periodic("* * * * *")(lambda: None)
    queued.registry.unregister("Report")
    queued.registry.unregister("sweeper")


def test_an_unknown_class_is_refused_only_when_its_queue_is_served_here(tmp_path):
    # A Ruby class for a queue a Ruby Sidekiq serves: queued pushes it, Sidekiq runs it
    path = tmp_path / "sidekiq.yml"
    block = ":scheduler:\n  :schedule:\n    ruby: {cron: '0 * * * *', class: RubyWorker, queue: ruby}\n"
    path.write_text(block)
    server_periodic.check(config_mod.load(["-C", str(path)], environ=NO_ENV))
    # The same class for a queue this process serves: every job would fail here; refused
    path.write_text(block + ":queues: [default, ruby]\n")
    with pytest.raises(config_mod.ConfigError) as err:
        server_periodic.check(config_mod.load(["-C", str(path)], environ=NO_ENV))
    assert str(err.value).startswith(f"{path}: scheduler.schedule.ruby.class: 'RubyWorker' "
                                     "is not a job class of this process")


# --- cron errors name the field and its range (issue 20)

@pytest.mark.parametrize("expr, field", [
    ("61 * * * *", "minute field '61': 61 is out of range, minute is 0-59"),
    ("* 24 * * *", "hour field '24': 24 is out of range, hour is 0-23"),
    ("0 0 0 * *", "day of month field '0': 0 is out of range, day of month is 1-31"),
    ("0 0 1 13 *", "month field '13': 13 is out of range, month is 1-12"),
    ("0 0 * * 1-8", "day of week field '1-8': 8 is out of range, day of week is 0-7"),
    ("75 * * * * *", "second field '75': 75 is out of range, second is 0-59"),
    ("*/0 * * * *", "minute field '*/0': a step of 0; */N needs N of 1 or more"),
    ("0,5,99 * * * *", "minute field '0,5,99': 99 is out of range, minute is 0-59")])
def test_a_cron_error_names_the_field_and_its_range(expr, field):
    with pytest.raises(Invalid) as info:
        parse_cron(expr)
    assert str(info.value) == f"not a valid cron expression: {expr!r} ({field})"


def test_a_cron_expression_with_the_wrong_number_of_fields_lists_them():
    with pytest.raises(Invalid) as info:
        parse_cron("0 3 * *")
    assert str(info.value).startswith(
        "not a valid cron expression: '0 3 * *' (it has 4 fields; cron takes 5, or 6 with "
        "seconds first: [second] minute hour day-of-month month day-of-week (second 0-59")


@pytest.mark.parametrize("expr", ["0 9 * * MON-FRI", "0 0 L * *", "0 0 1,15 * *",
                                  "*/10 * * * * *", "@daily", "0 9 * * 1-5 Europe/Berlin"])
def test_valid_cron_forms_still_parse(expr):
    assert parse_cron(expr).kind == "cron"


@pytest.mark.parametrize("timing, note", [
    (lambda: parse_cron("0 9 * * *"), "in UTC, not the host's zone"),
    (lambda: parse_cron("0 9 * * * Europe/Berlin"), "time zone Europe/Berlin"),
    (lambda: parse_every("5m"), "every master aligned to the epoch")])
def test_a_schedules_zone_note_for_the_startup_line_says_which_clock_it_follows(timing, note):
    assert timing().zone_note() == note
