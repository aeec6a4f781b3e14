"""Failures cross between the REAL Sidekiq 6.4 server and queued, both ways, byte-compatibly.

(a) A job that failed in Sidekiq waits in ``retry`` as Sidekiq wrote it; once due, queued's
scheduler moves it and a Python job of the same name runs it with Sidekiq's retry fields intact,
and when it fails again in queued the entry is Sidekiq's plus exactly what Sidekiq itself adds
on a second failure (retry_count 1, retried_at last, failed_at kept, key order kept).
(b) The other way round: Sidekiq's poller and processor accept queued's retry entry, run it,
and a second failure in Ruby counts on from queued's retry_count.
(c) The same job failing with the same message leaves the same entry (same keys, same order,
same values, the same JSON spelling) whichever server ran it; both backtraces decode in Ruby.
Retry delays are 15-24 s, so the tests rewrite the score of an entry to now to make it due.
Missing ruby or sidekiq: skipped locally, a failure under CI.
"""
from __future__ import annotations

import json
import re

import pytest
from harness import wait_for

from queued import payload

from . import realsidekiq
from .realsidekiq import WIRE_REQUIRE, make_due, runs_by_jid, typed, zentry

RUBY_FRAME = re.compile(r"^.+:\d+:in `.+'$")

RUBY_CHECK = r'''# encoding: utf-8
require "json"; require "zlib"; require "base64"
entries = ARGV.map { |raw| JSON.parse(raw) }
print JSON.generate(
  canonical: ARGV.map { |raw| JSON.generate(JSON.parse(raw)) == raw },
  backtraces: entries.map { |e|
    e["error_backtrace"] && JSON.parse(Zlib::Inflate.inflate(Base64.decode64(e["error_backtrace"])))
  })
'''


@pytest.fixture
def sidekiq(ruby, redis_url, r, tmp_path):
    yield from realsidekiq.servers(redis_url, r, tmp_path)


def ruby_check(ruby, *members: bytes) -> dict:
    """Ruby's view of retry members: is each exactly what JSON.generate writes for it, and
    its error_backtrace decoded with Zlib + Base64 (None without one)."""
    out = ruby(RUBY_CHECK, *(m.decode() for m in members), env={"RUBYOPT": "-EUTF-8"}).stdout
    return json.loads(out)


def retry_entry(r, jid: str, count: int = 0) -> tuple[bytes, float]:
    """Wait for ``jid``'s entry in ``retry`` with this retry_count; (member, score)."""
    def found():
        hit = zentry(r, "retry", jid)
        return hit if hit and json.loads(hit[0])["retry_count"] == count else None
    return wait_for(found, 20, what=f"{jid} in retry with retry_count {count}")


def cross(producer, tag: str, fail_in: str, **extra) -> str:
    return producer.push({"class": "CrossJob", "args": [tag, fail_in], **extra})


def with_enqueued_at(raw: bytes, value: float) -> bytes:
    """``raw`` with its enqueued_at number replaced (the one field a move to a queue sets)."""
    new, n = re.subn(rb'"enqueued_at":[-+.eE0-9]+', b'"enqueued_at":' + repr(value).encode(),
                     raw)
    assert n == 1
    return new


def test_a_job_failed_by_sidekiq_is_retried_and_failed_again_by_queued(
        producer, r, sidekiq, daemon, ruby):
    # Given two jobs that failed in the real Sidekiq (Ruby's CrossJob raises)
    server = sidekiq()
    ok = cross(producer, "a1 ünïcødé ☃ a/b", "ruby")
    again = cross(producer, "a2", "ruby python")
    (ok_raw, ok_score), (again_raw, _) = retry_entry(r, ok), retry_entry(r, again)
    assert server.stop() == 0
    by_ruby = json.loads(ok_raw)
    # (as Sidekiq writes a first failure: retry_count 0, failed_at, due 15-24 s later)
    assert list(by_ruby) == ["retry", "queue", "class", "args", "jid", "created_at",
                             "enqueued_at", "error_message", "error_class", "failed_at",
                             "retry_count"]
    assert (by_ruby["error_class"], by_ruby["error_message"], by_ruby["retry_count"]) == (
        "RuntimeError", "cross failure a1 ünïcødé ☃ a/b", 0)
    assert isinstance(by_ruby["failed_at"], float) and 15 <= ok_score - by_ruby["failed_at"] < 25
    assert "ünïcødé ☃ a/b".encode() in ok_raw  # raw UTF-8 and an unescaped slash, from Ruby

    # When a queued daemon (Python CrossJob: succeeds unless told to fail in "python") runs
    # and the retries come due
    d = daemon(require=WIRE_REQUIRE)
    make_due(r, "retry", ok)
    make_due(r, "retry", again)
    new_raw, new_score = retry_entry(r, again, count=1)
    wait_for(lambda: ok in runs_by_jid(r), 10, what="the first job to run in queued")
    assert d.stop() == 0

    # Then queued ran the first one once, with Sidekiq's payload as it was (retry fields and
    # all); only enqueued_at was set again, when it was moved to its queue
    (run,) = runs_by_jid(r)[ok]
    assert run["args"] == ["a1 ünïcødé ☃ a/b", "ruby"] and run["queue"] == "default"
    assert typed(run["msg"]) == typed({**by_ruby, "enqueued_at": run["msg"]["enqueued_at"]})
    assert zentry(r, "retry", ok) is None and r.zcard("dead") == 0
    # And the second one failed again in queued: retry_count 1, retried_at added last (then
    # queued's default backtrace, issue 20: Sidekiq stored none), failed_at untouched, every
    # other key where and what Sidekiq had it
    old, new = json.loads(again_raw), json.loads(new_raw)
    assert list(new) == list(old) + ["retried_at", "error_backtrace"]
    assert (new["retry_count"], new["failed_at"]) == (1, old["failed_at"])
    assert isinstance(new["retried_at"], float) and new["retried_at"] > old["failed_at"]
    assert new["enqueued_at"] > old["enqueued_at"]
    assert {k: v for k, v in new.items() if k not in ("enqueued_at", "retry_count",
                                                      "retried_at", "error_backtrace")} == {
        k: v for k, v in old.items() if k not in ("enqueued_at", "retry_count")}
    assert 16 <= new_score - new["retried_at"] < 36  # 1**4 + 15 + rand(10) * 2
    # And byte for byte: Sidekiq's bytes with those three changes, in Ruby's JSON spelling
    failed_at = re.search(rb'"failed_at":[^,}]+', again_raw)[0]
    assert failed_at in new_raw
    expected = dict(old, enqueued_at=new["enqueued_at"], retry_count=1,
                    retried_at=new["retried_at"], error_backtrace=new["error_backtrace"])
    assert new_raw == payload.dumps(expected).encode()
    assert ruby_check(ruby, new_raw)["canonical"] == [True]


def test_b_job_failed_by_queued_is_retried_and_failed_again_by_sidekiq(
        producer, r, sidekiq, daemon):
    # Given two jobs that failed in queued (Python's CrossJob raises)
    d = daemon(require=WIRE_REQUIRE)
    ok = cross(producer, "b1 ünïcødé ☃ a/b", "python")
    again = cross(producer, "b2", "python ruby", custom={"tenant": 7}, x_extra=1)
    (ok_raw, _), (again_raw, _) = retry_entry(r, ok), retry_entry(r, again)
    assert d.stop() == 0

    # When the real Sidekiq server runs (Ruby's CrossJob fails only when told "ruby") and
    # the retries come due
    server = sidekiq()
    make_due(r, "retry", ok)
    make_due(r, "retry", again)
    new_raw, _ = retry_entry(r, again, count=1)
    wait_for(lambda: ok in runs_by_jid(r, "t:ruby"), 10, what="the first job to run in Ruby")
    assert server.stop() == 0

    # Then Sidekiq's poller moved queued's entry and Ruby ran it once; the job Ruby got is
    # queued's entry byte for byte but for the enqueued_at Sidekiq set when it moved it
    (run,) = runs_by_jid(r, "t:ruby")[ok]
    assert run["args"] == ["b1 ünïcødé ☃ a/b", "python"]
    payloads = {json.loads(p)["jid"]: p for p in r.lrange("t:ruby:payloads", 0, -1)}
    ruby_job = json.loads(payloads[ok])
    assert payloads[ok] == with_enqueued_at(ok_raw, ruby_job["enqueued_at"])
    assert ruby_job["retry_count"] == 0 and ruby_job["error_class"] == "RuntimeError"
    assert zentry(r, "retry", ok) is None and r.zcard("dead") == 0
    # And the second failure, in Ruby, counted on from queued's entry: retry_count 1,
    # retried_at added, failed_at kept, queued's key order (extra keys too) kept
    old, new = json.loads(again_raw), json.loads(new_raw)
    assert list(new) == list(old) + ["retried_at"]
    assert (new["retry_count"], new["failed_at"]) == (1, old["failed_at"])
    assert (new["custom"], new["x_extra"]) == ({"tenant": 7}, 1)
    assert (new["error_class"], new["error_message"]) == ("RuntimeError", "cross failure b2")
    assert isinstance(new["retried_at"], float) and new["retried_at"] > old["failed_at"]
    expected = dict(old, enqueued_at=new["enqueued_at"], retry_count=1,
                    retried_at=new["retried_at"], error_backtrace=new["error_backtrace"])
    assert new_raw == payload.dumps(expected).encode()


def test_c_the_same_failure_leaves_the_same_entry_in_sidekiq_and_queued(
        producer, r, sidekiq, daemon, ruby):
    item = {"class": "CrossJob", "args": ['cmp ünïcødé ☃ "q" a/b', "ruby python"],
            "backtrace": True}
    # Given the same job failing with the same message, once in Sidekiq, once in queued
    server = sidekiq()
    rb_jid = producer.push(item)
    rb_raw, rb_score = retry_entry(r, rb_jid)
    assert server.stop() == 0
    d = daemon(require=WIRE_REQUIRE)
    py_jid = producer.push(item)
    py_raw, py_score = retry_entry(r, py_jid)
    assert d.stop() == 0
    rb, py = json.loads(rb_raw), json.loads(py_raw)

    # Then the entries have the same keys in the same order
    assert list(py) == list(rb) == [
        "retry", "queue", "class", "args", "backtrace", "jid", "created_at", "enqueued_at",
        "error_message", "error_class", "failed_at", "retry_count", "error_backtrace"]
    # And the same values, field by field, but for the job's own id and times
    for key in ("retry", "queue", "class", "args", "backtrace", "error_message",
                "error_class", "retry_count"):
        assert typed(py[key]) == typed(rb[key]), key
    for key in ("created_at", "enqueued_at", "failed_at"):
        assert type(py[key]) is type(rb[key]) is float, key
    assert 15 <= rb_score - rb["failed_at"] < 25 and 15 <= py_score - py["failed_at"] < 25
    # And the same bytes once the job's own jid, times and backtrace are swapped in
    swapped = dict(py, **{k: rb[k] for k in ("jid", "created_at", "enqueued_at", "failed_at",
                                             "error_backtrace")})
    assert payload.dumps(swapped).encode() == rb_raw
    # And Ruby decodes both backtraces (Zlib + Base64 + JSON) into Ruby-style frames, and
    # reads queued's entry as JSON it would have written itself
    seen = ruby_check(ruby, rb_raw, py_raw)
    assert seen["canonical"] == [True, True]
    rb_lines, py_lines = seen["backtraces"]
    for lines in (rb_lines, py_lines):
        assert lines and all(isinstance(x, str) and RUBY_FRAME.match(x) for x in lines)
        assert lines[0].endswith(":in `perform'")
    assert "workers.rb" in rb_lines[0] and "wire_jobs.py" in py_lines[0]
    assert py["error_backtrace"].endswith("\n") and rb["error_backtrace"].endswith("\n")
    assert all(len(x) <= 60 for x in py["error_backtrace"].splitlines())
