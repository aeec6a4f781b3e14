"""What a failure leaves in Redis, field by field against SIDEKIQ_FORMAT.md section 5, and the
payloads a daemon must survive."""
import base64
import datetime
import json
import re
import time
import zlib

import jobs
from harness import counts, wait_for, zjobs, zmembers

RUBY_FRAME = re.compile(r"^.+:\d+:in `.+'$")


def done(r):
    return counts(r, jobs.DONE)


def test_a_failure_with_backtrace_is_stored_as_sidekiq_stores_it(daemon, producer, r):
    d = daemon()
    before = time.time()
    # When Sidekiq's FailWorker example (backtrace: true) fails in a real daemon
    jid = jobs.FailBacktrace.perform_async(1, "x")
    ((member, score),) = wait_for(lambda: zmembers(r, "retry"), 5, what="retry entry")
    entry = json.loads(member)
    # Then the retry member has Sidekiq's keys in Sidekiq's order
    assert list(entry) == ["retry", "queue", "backtrace", "args", "class", "jid", "created_at",
                           "enqueued_at", "error_message", "error_class", "failed_at",
                           "retry_count", "error_backtrace"]
    assert entry["retry"] is True and entry["queue"] == "default" and entry["backtrace"] is True
    assert entry["args"] == [1, "x"] and entry["class"] == "FailBacktrace" and entry["jid"] == jid
    # And the error fields: message (raw UTF-8 on the wire, like Ruby's JSON), class, time
    assert entry["error_message"] == 'boom ünïcødé [1, "x"]'
    assert "boom ünïcødé".encode() in member
    assert entry["error_class"] == "RuntimeError"
    assert isinstance(entry["failed_at"], float) and before <= entry["failed_at"] <= time.time()
    assert entry["retry_count"] == 0
    assert entry["created_at"] <= entry["enqueued_at"] <= entry["failed_at"]
    # And the score is failed_at + 0**4 + 15 + rand(10) jitter
    assert 15 <= score - entry["failed_at"] < 25
    # And the backtrace is zlib + base64 of a JSON list of Ruby-style frames, innermost first
    lines = json.loads(zlib.decompress(base64.b64decode(entry["error_backtrace"])))
    assert isinstance(lines, list) and lines and all(isinstance(x, str) for x in lines)
    assert all(RUBY_FRAME.match(x) for x in lines), lines
    assert "jobs.py" in lines[0] and lines[0].endswith("in `perform'")
    assert entry["error_backtrace"].endswith("\n")  # Ruby's Base64.encode64 line breaks
    assert d.stop() == 0


def test_an_unknown_class_goes_to_retry_as_unknownjobclass(daemon, producer, r):
    d = daemon()
    jid = producer.push({"class": "Billing::NoSuchJob", "args": [1]})
    (entry,) = wait_for(lambda: zjobs(r, "retry"), 5, what="retry entry")
    assert entry["jid"] == jid and entry["class"] == "Billing::NoSuchJob"
    assert entry["error_class"] == "UnknownJobClass"
    assert "Billing::NoSuchJob" in entry["error_message"]
    assert entry["retry_count"] == 0
    assert d.stop() == 0


UNUSABLE = {
    b"not json": "not valid JSON",
    b"[1,2,3]": "not an object",
    b'{"args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}': 'payload has no "class" string',
    b'{"class":"Record","args":"x","jid":"bbbbbbbbbbbbbbbbbbbbbbbb"}':
        'payload "args" is str, not a list',
}


def test_unusable_payloads_go_to_dead_with_the_reason_and_the_daemon_keeps_serving(
        daemon, producer, r):
    d = daemon()
    # When a producer writes elements that are not usable jobs, then a good one
    for raw in UNUSABLE:
        r.sadd("queues", "default")
        r.lpush("queue:default", raw)
    good = jobs.Record.perform_async("good")
    # Then each is in dead: a JSON object with its own keys kept, in their order, and the
    # failure fields Sidekiq's Web UI shows (error_class, error_message); anything else
    # exactly as it was written. The good job runs; the log says why
    wait_for(lambda: done(r).get(good) == 1 and r.zcard("dead") == len(UNUSABLE), 5,
             what="dead entries and the good job")
    members = {m for m, _ in zmembers(r, "dead")}
    assert {b"not json", b"[1,2,3]"} <= members
    objects = sorted((json.loads(m) for m in members if m.startswith(b"{")),
                     key=lambda e: e["jid"])
    for entry, (raw, why) in zip(objects, list(UNUSABLE.items())[2:]):
        original = json.loads(raw)
        assert list(entry)[:len(original)] == list(original)
        assert {k: entry[k] for k in original} == original
        assert (entry["queue"], entry["error_class"], entry["error_message"],
                entry["retry_count"]) == ("default", "PayloadError", why, 0)
        assert abs(entry["failed_at"] - time.time()) < 10
    assert all(abs(s - time.time()) < 10 for _, s in zmembers(r, "dead"))
    out = d.output()
    assert out.count("unusable payload sent to dead") == len(UNUSABLE)
    for why in UNUSABLE.values():
        assert why in out
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0
    # And the daemon is still serving
    again = jobs.Record.perform_async("again")
    wait_for(lambda: done(r).get(again) == 1, 5, what="a job after them")
    assert d.stop() == 0


def test_after_succeeded_and_after_failed_hooks_run(daemon, producer, r):
    d = daemon()
    ok = jobs.Hooks.perform_async()
    bad = jobs.Hooks.perform_async(True)
    wait_for(lambda: r.llen("t:hooks") == 2, 5, what="both hooks")
    assert {h.decode() for h in r.lrange("t:hooks", 0, -1)} == {
        f"ok:{ok}", f"failed:{bad}:ValueError"}
    (dead,) = zjobs(r, "dead")  # retry: 0 -> dead on the first failure
    assert dead["jid"] == bad and dead["error_class"] == "ValueError"
    assert d.stop() == 0


def test_stats_are_counted_by_the_heartbeat(daemon, producer, r):
    d = daemon()
    # When 3 jobs succeed and 2 fail
    for i in range(3):
        jobs.Record.perform_async(i)
    jobs.Fail.perform_async()
    jobs.Hooks.perform_async(True)
    # Then, after a heartbeat, processed counts every attempt and failed the failures,
    # in the totals and in today's (UTC) keys with their 5-year TTL
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    wait_for(lambda: r.get("stat:processed") == b"5" and r.get("stat:failed") == b"2", 5,
             what="stats")
    assert r.get(f"stat:processed:{day}") == b"5" and r.get(f"stat:failed:{day}") == b"2"
    for key in (f"stat:processed:{day}", f"stat:failed:{day}"):
        assert 5 * 365 * 24 * 3600 - 60 < r.ttl(key) <= 5 * 365 * 24 * 3600
    assert r.ttl("stat:processed") == -1
    assert d.stop() == 0
    assert r.get("stat:processed") == b"5"  # nothing counted twice at exit
