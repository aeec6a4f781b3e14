"""Ruby's real Sidekiq::Client (Debian's sidekiq 6.4.1) pushes, a queued daemon runs.

Every way a Ruby app enqueues (perform_async on a ``Sidekiq::Worker`` class, perform_in,
perform_at, ``set(queue:)``, push_bulk with and without ``at``, ``Client.push`` with extra keys)
reaches a Python job of the same name exactly once, with its arguments as Ruby meant them:
integers beyond 64 bits, ``1`` apart from ``1.0``, NUL and emoji, 50 levels of nesting, empty
and numeric-string object keys. The retry option Ruby writes decides what queued does with a
failure (true / N / 0 / false), and Ruby's extra payload keys survive into ``retry`` and
``dead``. Missing ruby or sidekiq: skipped locally, a failure under CI.
"""
from __future__ import annotations

import base64
import json
import re
import time
import zlib

from harness import wait_for

from . import realsidekiq
from .realsidekiq import ARGS, WIRE_REQUIRE, depth, make_due, runs_by_jid, typed, zentry

RUBY_PRELUDE = r'''# encoding: utf-8
require "json"
require "sidekiq"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.configure_client { |c| c.redis = {url: ARGV[0]} }
Sidekiq.logger.level = Logger::WARN

class InteropRecord
  include Sidekiq::Worker
end

class InteropFail
  include Sidekiq::Worker
end
''' + realsidekiq.RUBY_ARGS

PUSH_EVERY_WAY = r'''
t0 = Time.now.to_f
jids = {
  "async" => InteropRecord.perform_async(*ARGS),
  "in" => InteropRecord.perform_in(1, "in", 1, 1.0),
  "at" => InteropRecord.perform_at(t0 + 1.5, "at", 2**70),
  "setq" => InteropRecord.set(queue: "other").perform_async("setq", 1.0, -(2**65)),
  "bulk" => Sidekiq::Client.push_bulk("class" => InteropRecord,
                                      "args" => [["bulk", 1], ["bulk", 1.0], ["bulk", ARGS]]),
  "bulk_at" => Sidekiq::Client.push_bulk("class" => "InteropRecord", "at" => t0 + 1,
                                         "args" => [["bulk_at", 1], ["bulk_at", 2]]),
  "push" => Sidekiq::Client.push("class" => "InteropRecord", "args" => ["push", ARGS],
                                 "custom" => {"tenant" => 7, "trace" => "abc"}, "x_extra" => 1,
                                 "tags" => ["alpha", "beta"]),
}
puts JSON.generate(jids)
'''

PUSH_FAILING = r'''
puts JSON.generate({
  "true" => InteropFail.perform_async("retry-true", 1.0),
  "two" => InteropFail.set(retry: 2).perform_async("retry-2"),
  "zero" => InteropFail.set(retry: 0).perform_async("retry-0"),
  "false" => InteropFail.set(retry: false).perform_async("retry-false"),
  "bt" => InteropFail.set(retry: 0, backtrace: true).perform_async("bt"),
  "extra" => Sidekiq::Client.push("class" => "InteropFail", "args" => ["extra", ARGS],
                                  "retry" => 1, "backtrace" => 2,
                                  "custom" => {"tenant" => 7, "trace" => "abc"},
                                  "x_extra" => 1, "tags" => ["alpha", "beta"]),
})
'''

RUBY_FRAME = re.compile(r"^.+:\d+:in `.+'$")


def push_from_ruby(ruby, redis_url, code: str) -> dict:
    proc = ruby(RUBY_PRELUDE + code, redis_url, env={"RUBYOPT": "-EUTF-8"})
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pushed_payloads(r) -> dict[str, tuple[bytes, float | None]]:
    """jid -> (raw bytes, schedule score or None) of everything waiting in Redis."""
    out = {}
    for key in r.keys("queue:*"):
        for raw in r.lrange(key, 0, -1):
            out[json.loads(raw)["jid"]] = (raw, None)
    for raw, score in r.zrange("schedule", 0, -1, withscores=True):
        out[json.loads(raw)["jid"]] = (raw, score)
    return out


def backtrace_lines(entry: dict) -> list[str]:
    return json.loads(zlib.decompress(base64.b64decode(entry["error_backtrace"])))


def test_every_ruby_push_runs_once_with_its_args_intact(ruby, redis_url, r, daemon):
    # Given jobs pushed by Sidekiq::Client in every way a Ruby app does it (before queued
    # runs, so the exact bytes Ruby wrote can be read back)
    jids = push_from_ruby(ruby, redis_url, PUSH_EVERY_WAY)
    expected = {jids["async"]: ARGS, jids["in"]: ["in", 1, 1.0], jids["at"]: ["at", 2**70],
                jids["setq"]: ["setq", 1.0, -(2**65)], jids["push"]: ["push", ARGS]}
    expected.update(zip(jids["bulk"], (["bulk", 1], ["bulk", 1.0], ["bulk", ARGS])))
    expected.update(zip(jids["bulk_at"], (["bulk_at", 1], ["bulk_at", 2])))
    pushed = pushed_payloads(r)
    assert set(pushed) == set(expected)
    scheduled = {jid for jid, (_, score) in pushed.items() if score is not None}
    assert scheduled == {jids["in"], jids["at"], *jids["bulk_at"]}
    # (Ruby wrote the big ints bare, 1.0 with its fraction, the emoji raw, NUL escaped)
    raw_async = pushed[jids["async"]][0]
    assert (b'"args":[1180591620717411303424,-36893488147419103232,18446744073709551623,'
            b'1,1.0,-0.0,0.1,1.0e+20,1.0e+15,2.5e-07,"a\\u0000b","emoji \xf0\x9f\x98\x80'
            in raw_async)

    # When a queued daemon serving both queues runs with Python jobs of the same names
    d = daemon(queues=["default", "other"], require=WIRE_REQUIRE)
    wait_for(lambda: set(runs_by_jid(r)) == set(expected), 20, what="every Ruby job to run")
    # (stopped before the runs are counted: a duplicate cannot come after the count, and a
    # job still held would be put back in its queue, where the end of the test looks)
    assert d.stop() == 0
    runs = runs_by_jid(r)

    # Then each ran exactly once, with the arguments Ruby meant, typed (1 is not 1.0)
    for jid, args in expected.items():
        (run,) = runs[jid]
        assert typed(run["args"]) == typed(args), jid
        assert run["class"] == "InteropRecord"
        raw, score = pushed[jid]
        sent = json.loads(raw)
        # And the job saw Ruby's whole payload (extra keys and key order too); scheduled
        # ones gained only enqueued_at, set when they were moved to their queue
        if score is None:
            assert typed(run["msg"]) == typed(sent), jid
        else:
            assert typed(run["msg"]) == typed({**sent, "enqueued_at": run["msg"]["enqueued_at"]})
            assert run["t"] >= score - 0.01, "ran before its time"
            assert score <= run["msg"]["enqueued_at"] < score + 10
    assert runs[jids["setq"]][0]["queue"] == "other"
    assert {runs[j][0]["queue"] for j in expected if j != jids["setq"]} == {"default"}
    deep = runs[jids["async"]][0]["args"][13]
    assert depth(deep) == 50 and depth(runs[jids["push"]][0]["args"][1]) == 51
    assert runs[jids["async"]][0]["args"][10] == "a\x00b"
    push_msg = runs[jids["push"]][0]["msg"]
    assert push_msg["custom"] == {"tenant": 7, "trace": "abc"} and push_msg["x_extra"] == 1
    assert push_msg["tags"] == ["alpha", "beta"]
    # And nothing is left anywhere
    assert r.llen("queue:default") == r.llen("queue:other") == 0
    assert r.zcard("schedule") == r.zcard("retry") == r.zcard("dead") == 0


def test_the_retry_option_ruby_writes_decides_and_extra_keys_survive(ruby, redis_url, r,
                                                                     daemon):
    # Given failing jobs pushed from Ruby with retry true / 2 / 0 / false, a backtrace
    # option, and one with extra payload keys
    jids = push_from_ruby(ruby, redis_url, PUSH_FAILING)
    sent = {json.loads(raw)["jid"]: json.loads(raw) for raw in r.lrange("queue:default", 0, -1)}
    assert [sent[jids[k]]["retry"] for k in ("true", "two", "zero", "false")] == [
        True, 2, 0, False]
    d = daemon(require=WIRE_REQUIRE)

    def nruns():
        return {name: len(runs_by_jid(r).get(jid, [])) for name, jid in jids.items()}

    # When each has failed once
    wait_for(lambda: nruns() == dict.fromkeys(jids, 1) and r.zcard("retry") == 3
             and r.zcard("dead") == 2, 15, what="every job to fail once")
    in_retry = {json.loads(m)["jid"] for m in r.zrange("retry", 0, -1)}
    in_dead = {json.loads(m)["jid"] for m in r.zrange("dead", 0, -1)}
    # Then retry: 0 is dead at once (Ruby truthiness), retry: false is dropped
    assert in_retry == {jids["true"], jids["two"], jids["extra"]}
    assert in_dead == {jids["zero"], jids["bt"]}
    for name in ("zero", "bt"):
        (member, _) = zentry(r, "dead", jids[name])
        entry = json.loads(member)
        assert entry["retry"] == 0 and entry["retry_count"] == 0
        assert (entry["error_class"], entry["error_message"]) == (
            "RuntimeError", f"interop failure {sent[jids[name]]['args'][0]}")
        assert isinstance(entry["failed_at"], float) and "retried_at" not in entry
    # And backtrace: true stored every line (innermost first, Ruby's format); without the
    # option, queued's default: the job's own frames of the same stack, at most 20 (issue
    # 20; Sidekiq stores none)
    bt = json.loads(zentry(r, "dead", jids["bt"])[0])
    lines = backtrace_lines(bt)
    assert lines and all(RUBY_FRAME.match(x) for x in lines)
    assert "wire_jobs.py" in lines[0] and lines[0].endswith("in `perform'")
    default = backtrace_lines(json.loads(zentry(r, "dead", jids["zero"])[0]))
    assert default[0] == lines[0] and set(default) <= set(lines) and len(default) <= 20
    # And a retry entry is the job as Ruby wrote it plus the failure fields, in Sidekiq's order
    first = {}
    for name in ("true", "two", "extra"):
        member, score = zentry(r, "retry", jids[name])
        entry = first[name] = json.loads(member)
        original = sent[jids[name]]
        assert list(entry)[:len(original)] == list(original), name
        assert typed({k: entry[k] for k in original}) == typed(original), name
        # (error_backtrace: the option's, else queued's default)
        added = ["error_message", "error_class", "failed_at", "retry_count", "error_backtrace"]
        assert list(entry)[len(original):] == added, name
        assert entry["retry_count"] == 0
        assert 1 <= score - entry["failed_at"] < 11  # retry_in 1 + rand(10) jitter
    assert first["extra"]["custom"] == {"tenant": 7, "trace": "abc"}
    assert (first["extra"]["x_extra"], first["extra"]["tags"]) == (1, ["alpha", "beta"])
    assert len(backtrace_lines(first["extra"])) == 2  # backtrace: 2
    # (retry: true's entry may come due 1 s after its failure, jitter 0: put it an hour
    # away, so it waits through the rest of the test however slow the machine is)
    assert r.zadd("retry", {zentry(r, "retry", jids["true"])[0]: time.time() + 3600},
                  xx=True, ch=True) == 1

    # When the retries of "two" and "extra" come due
    make_due(r, "retry", jids["two"])
    make_due(r, "retry", jids["extra"])
    wait_for(lambda: nruns()["two"] == 2 and nruns()["extra"] == 2 and r.zcard("dead") == 3
             and zentry(r, "retry", jids["two"]) and json.loads(
                 zentry(r, "retry", jids["two"])[0])["retry_count"] == 1, 15,
             what="the second failures")
    # Then retry: 1 is exhausted: dead, with Ruby's extra keys where Ruby put them
    dead = json.loads(zentry(r, "dead", jids["extra"])[0])
    assert list(dead) == list(first["extra"]) + ["retried_at"]
    for key in first["extra"]:
        if key not in ("enqueued_at", "retry_count", "error_backtrace"):
            assert typed(dead[key]) == typed(first["extra"][key]), key
    assert dead["retry_count"] == 1 and dead["retried_at"] > dead["failed_at"]
    assert dead["custom"] == {"tenant": 7, "trace": "abc"} and dead["x_extra"] == 1
    assert dead["tags"] == ["alpha", "beta"] and typed(dead["args"]) == typed(["extra", ARGS])
    # And retry: 2 retries twice: the second failure is retry_count 1, failed_at kept
    two = json.loads(zentry(r, "retry", jids["two"])[0])
    assert two["failed_at"] == first["two"]["failed_at"] and "retried_at" in two

    # When it comes due once more, its third failure sends it to dead
    make_due(r, "retry", jids["two"])
    wait_for(lambda: nruns()["two"] == 3 and zentry(r, "dead", jids["two"]), 15,
             what="the third failure")
    two = json.loads(zentry(r, "dead", jids["two"])[0])
    assert two["retry_count"] == 2 and two["retry"] == 2
    # And retry: true is still waiting for its first retry; nothing ran more than it should
    assert [json.loads(m)["jid"] for m in r.zrange("retry", 0, -1)] == [jids["true"]]
    assert nruns() == {"true": 1, "two": 3, "zero": 1, "false": 1, "bt": 1, "extra": 2}
    assert d.stop() == 0
