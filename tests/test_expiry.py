"""Expiring jobs, the producer's side (a real Redis): ``expires_in`` becomes the payload's
``expires_at``, counted from the push or from a scheduled job's run time, the same through
every push path; bad values are refused; the worker's test of a deadline."""
import json

import pytest

import queued
from queued import client as client_mod, expiry


class Ephemeral(queued.Job):
    queued_options = {"expires_in": 30}

    def perform(self, *args):
        pass


class Lasting(queued.Job):
    def perform(self, *args):
        pass


@pytest.fixture
def frozen(monkeypatch):
    monkeypatch.setattr(client_mod, "clock", lambda: 1_800_000_000.5)
    return 1_800_000_000.5


def test_expires_at_counts_from_the_push(producer, r, frozen):
    Ephemeral.perform_async(1)
    msg = json.loads(r.lindex("queue:default", 0))
    assert msg["expires_at"] == frozen + 30 and "expires_in" not in msg
    assert list(msg)[-2:] == ["expires_at", "enqueued_at"]


def test_a_scheduled_jobs_clock_starts_at_its_run_time(producer, r, frozen):
    Ephemeral.perform_in(3600, 1)
    ((member, at),) = r.zrange("schedule", 0, -1, withscores=True)
    assert at == frozen + 3600
    assert json.loads(member)["expires_at"] == frozen + 3600 + 30


def test_bulk_pushes_write_the_same_deadline_as_single_pushes(producer, r, frozen):
    # The bulk path splices args into one encoded payload; its deadline must be the same
    Ephemeral.perform_async(1)
    single = json.loads(r.lpop("queue:default"))
    Ephemeral.perform_bulk([[1], [2]])
    bulk = [json.loads(m) for m in r.lrange("queue:default", 0, -1)]
    assert {m["expires_at"] for m in bulk} == {single["expires_at"]} == {frozen + 30}
    assert not any("expires_in" in m for m in bulk)
    Ephemeral.set(wait=60).perform_bulk([[4]])
    (later,) = r.zrange("schedule", 0, -1)
    assert json.loads(later)["expires_at"] == frozen + 60 + 30


def test_set_expires_in_for_one_push_and_none_for_none(producer, r, frozen):
    Lasting.set(expires_in=5).perform_async()
    Lasting.set(expires_in=None).perform_async()
    first, second = (json.loads(m) for m in reversed(r.lrange("queue:default", 0, -1)))
    assert first["expires_at"] == frozen + 5
    assert "expires_at" not in second and "expires_in" not in second
    with pytest.raises(TypeError, match="expires_in"):
        Lasting.set(expires_in=-1)
    with pytest.raises(ValueError, match="expires_at"):
        producer.push({"class": "Ruby::Job", "args": [], "expires_at": "tomorrow"})


@pytest.mark.parametrize("huge", [1e20, 1e308, float("inf"), 10**400])
def test_an_expires_in_past_ten_years_is_refused_at_the_call(producer, r, huge):
    with pytest.raises(ValueError, match=r"expires_in.*at most 315360000 seconds"):
        Lasting.set(expires_in=huge)
    with pytest.raises(ValueError, match=r"expires_in.*at most 315360000 seconds"):
        producer.push({"class": "Ruby::Job", "args": [], "expires_in": huge})
    assert r.keys("*") == []


def test_an_expires_at_past_what_a_float_holds_is_refused_at_the_push_and_ignored_in_a_job(
        producer, r):
    with pytest.raises(ValueError, match="expires_at"):
        producer.push({"class": "Ruby::Job", "args": [], "expires_at": 10**400})
    # a foreign payload's: no usable deadline, so none (it used to raise OverflowError)
    assert expiry.deadline({"expires_at": 10**400}) is None
    assert expiry.expired({"expires_at": 10**400}, 2e9) is None


def test_a_foreign_producers_expires_at_is_read_in_seconds_or_milliseconds():
    assert expiry.deadline({"expires_at": 1_800_000_000.25}) == 1_800_000_000.25
    assert expiry.deadline({"expires_at": 1_800_000_000_250}) == 1_800_000_000.25
    assert expiry.deadline({"expires_at": "soon"}) is None
    assert expiry.deadline({}) is None
    assert expiry.expired({"expires_at": 100.0}, 100.0) is None  # not past it yet
    assert expiry.expired({"expires_at": 100.0}, 100.001) == 100.0


def test_a_periodic_jobs_deadline_counts_from_its_tick(producer, r):
    import importlib
    from queued.keys import Keys
    periodic = importlib.import_module("queued.periodic")  # (queued.periodic is also a function)
    r.hset(Keys().cron_job("digest"), mapping={"name": "digest", "status": "enabled"})
    schedule = periodic.Schedule("digest", None, "Ephemeral")
    msg = periodic.stamp(periodic.message(schedule, Ephemeral), "digest", None, 1_800_000_000.0,
                         "d" * 24)
    assert periodic.enqueue(r, Keys(), "digest", msg, 1_800_000_000.5) == "enqueued"
    pushed = json.loads(r.lindex("queue:default", 0))
    assert pushed["expires_at"] == 1_800_000_030.5 and "expires_in" not in pushed
