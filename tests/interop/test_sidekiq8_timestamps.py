"""Jobs written the way a Sidekiq 8 producer/server writes them run on queued.

Sidekiq 8 stores ``created_at``, ``enqueued_at``, ``failed_at`` and ``retried_at`` as integer
epoch milliseconds (zset scores stay float seconds). queued keeps every such value it does not
own byte for byte (``created_at``, and the ``failed_at`` of a job that first failed in Sidekiq
8), writes the fields it sets itself in Sidekiq 6/7 float seconds (``failed_at`` of a first
failure, ``retried_at``, ``enqueued_at`` on every move to a queue), counts retries on from
Sidekiq 8's ``retry_count``, and shows such jobs in the heartbeat as they are.
``payload.to_epoch`` reads both forms. No Ruby needed: the payloads are written by hand.

(The engine interprets no payload timestamp today: the scheduler reads zset scores, the
heartbeat's ``run_at`` is the worker's own clock. ``to_epoch`` is there for the code that will.)
"""
from __future__ import annotations

import json
import re
import time

from harness import wait_for
from jobs import open_gate

from queued.payload import new_jid, to_epoch

from .realsidekiq import WIRE_REQUIRE, make_due, runs_by_jid, typed, zentry


def ms(seconds_ago: float = 0.0) -> int:
    return int((time.time() - seconds_ago) * 1000)


def s8_job(cls: str, args: list, **extra) -> dict:
    return {"retry": 2, "queue": "default", "class": cls, "args": args, "jid": new_jid(),
            "created_at": ms(60), "enqueued_at": ms(50), **extra}


def enqueue(r, job: dict) -> bytes:
    raw = json.dumps(job, separators=(",", ":")).encode()
    r.sadd("queues", "default")
    r.lpush("queue:default", raw)
    return raw


def field(raw: bytes, name: str) -> bytes:
    """The JSON text of a top-level number field, as written."""
    return re.search(rb'"' + name.encode() + rb'":(-?[0-9.eE+-]+)', raw)[1]


def entry(r, zset: str, jid: str, count: int | None = None):
    def found():
        hit = zentry(r, zset, jid)
        if hit and (count is None or json.loads(hit[0])["retry_count"] == count):
            return hit
        return None
    return wait_for(found, 15, what=f"{jid} in {zset}" + (f" with retry_count {count}"
                                                        if count is not None else ""))


def recent(value, within: float = 120) -> bool:
    """A timestamp of either form that is about now, read the way queued reads them."""
    return abs(to_epoch(value) - time.time()) < within


def test_sidekiq8_jobs_run_fail_retry_and_die_on_queued(r, daemon):
    d = daemon(require=WIRE_REQUIRE)
    # Given a job pushed by a Sidekiq 8 client (ms created_at/enqueued_at) that fails
    fresh = s8_job("InteropFail", ["s8-fresh"])
    fresh_raw = enqueue(r, fresh)
    # And one that already failed once in a Sidekiq 8 server (ms failed_at), now due
    failed8 = s8_job("InteropFail", ["s8-failed"], error_message="interop failure s8-failed",
                     error_class="RuntimeError", failed_at=ms(40), retry_count=0)
    r.zadd("retry", {json.dumps(failed8, separators=(",", ":")): time.time()})
    # And one that failed twice there (ms retried_at too), now due, with retries left
    twice8 = s8_job("InteropFail", ["s8-twice"], retry=5, error_message="x",
                    error_class="RuntimeError", failed_at=ms(40), retry_count=1,
                    retried_at=ms(30))
    r.zadd("retry", {json.dumps(twice8, separators=(",", ":")): time.time()})
    # And a Sidekiq 8 scheduled job (the score is float seconds, as in every version)
    sched = s8_job("InteropRecord", ["s8-scheduled", 1.0])
    del sched["enqueued_at"]
    sched_at = time.time() + 0.5
    r.zadd("schedule", {json.dumps(sched, separators=(",", ":")): sched_at})

    # When queued runs them
    fresh_raw1, fresh_score = entry(r, "retry", fresh["jid"], 0)
    failed_raw1, _ = entry(r, "retry", failed8["jid"], 1)
    twice_raw1, _ = entry(r, "retry", twice8["jid"], 2)
    wait_for(lambda: sched["jid"] in runs_by_jid(r), 10, what="the scheduled job")
    now = time.time()

    # Then a first failure keeps the producer's ms created_at/enqueued_at as written and adds
    # failed_at in float seconds (and queued's default backtrace); the retry score is seconds
    first = json.loads(fresh_raw1)
    assert list(first) == list(fresh) + ["error_message", "error_class", "failed_at",
                                         "retry_count", "error_backtrace"]
    for key in ("created_at", "enqueued_at"):
        assert field(fresh_raw1, key) == field(fresh_raw, key) == str(fresh[key]).encode()
    assert isinstance(first["failed_at"], float) and abs(first["failed_at"] - now) < 30
    assert 1 <= fresh_score - first["failed_at"] < 11 and fresh_score < 10**11
    # And a job that first failed in Sidekiq 8 keeps its ms failed_at, counts on (1), and
    # gets retried_at in float seconds after retry_count; enqueued_at was re-set (seconds)
    # when queued moved it to its queue; created_at is untouched
    second = json.loads(failed_raw1)
    assert list(second) == list(failed8) + ["retried_at", "error_backtrace"]
    assert second["failed_at"] == failed8["failed_at"] and type(second["failed_at"]) is int
    assert field(failed_raw1, "failed_at") == str(failed8["failed_at"]).encode()
    assert field(failed_raw1, "created_at") == str(failed8["created_at"]).encode()
    assert isinstance(second["retried_at"], float) and abs(second["retried_at"] - now) < 30
    assert isinstance(second["enqueued_at"], float) and abs(second["enqueued_at"] - now) < 30
    # And a Sidekiq 8 ms retried_at is replaced by queued's own (seconds), failed_at kept
    third = json.loads(twice_raw1)
    assert list(third) == list(twice8) + ["error_backtrace"]
    assert (third["retry_count"], third["failed_at"]) == (2, twice8["failed_at"])
    assert isinstance(third["retried_at"], float) and abs(third["retried_at"] - now) < 30
    # And the scheduled one ran, on time, with its ms created_at and a seconds enqueued_at
    (run,) = runs_by_jid(r)[sched["jid"]]
    assert run["t"] >= sched_at - 0.01
    assert typed(run["msg"]) == typed({**sched, "enqueued_at": run["msg"]["enqueued_at"]})
    assert isinstance(run["msg"]["enqueued_at"], float)

    # When the Sidekiq 8 job's last retry comes due and fails (retry: 2)
    make_due(r, "retry", failed8["jid"])
    dead_raw, dead_score = entry(r, "dead", failed8["jid"])
    # Then it is dead with its ms failed_at still as Sidekiq 8 wrote it, scored in seconds
    dead = json.loads(dead_raw)
    assert dead["retry_count"] == 2 and dead["failed_at"] == failed8["failed_at"]
    assert field(dead_raw, "failed_at") == str(failed8["failed_at"]).encode()
    assert abs(dead_score - time.time()) < 30
    # And every timestamp, whoever wrote it, reads as "about now" through to_epoch
    for e in (first, second, third, dead, run["msg"]):
        for key in ("created_at", "enqueued_at", "failed_at", "retried_at"):
            if key in e:
                assert recent(e[key]), (key, e[key])
    assert len(runs_by_jid(r)[failed8["jid"]]) == 2
    assert d.stop() == 0


def test_a_running_sidekiq8_job_shows_in_the_heartbeat_as_it_is(r, daemon):
    # Given a daemon running a Sidekiq 8 job (until the test opens its gate)
    d = daemon(require=WIRE_REQUIRE, concurrency=1)
    job = s8_job("InteropGate", ["s8-busy"])
    raw = enqueue(r, job)
    wait_for(lambda: job["jid"] in runs_by_jid(r), 10, what="the job to start")
    started = time.time()
    workers = f"{d.identity()}:workers"
    # When a heartbeat shows it
    (work,) = wait_for(lambda: list(r.hgetall(workers).values()),
                       what="the job in <identity>:workers")
    work = json.loads(work)
    # Then the payload is the producer's, byte for byte (ms timestamps included), and
    # run_at is the worker's start time in integer seconds
    assert work["payload"].encode() == raw
    assert work["queue"] == "default"
    assert isinstance(work["run_at"], int) and started - 60 < work["run_at"] <= started
    open_gate(r, "s8-busy")
    wait_for(lambda: r.hlen(workers) == 0, 10, what="the job to finish")
    assert d.stop() == 0
