"""queued's client against the real Sidekiq 6.4 client (Debian ruby-sidekiq).

The same pushes are made from Ruby and from Python with the clock and the jid generator pinned
to the same values on both sides (Ruby: Time.now and SecureRandom.hex prepended; Python:
queued.client.clock and queued.client.new_jid), and the whole Redis database is compared: every
key, every list element and zset member byte for byte, every score. Then Ruby's Sidekiq API
reads what queued pushed, and an unpinned push is compared by key order and values.

Missing ruby or sidekiq: skipped locally, a failure under CI.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
import redis as redis_lib

import queued.client as client_mod
from queued.job import Job

IN_CI = bool(os.environ.get("CI"))


def _ruby_sidekiq_missing() -> str | None:
    if shutil.which("ruby") is None:
        return "ruby is not installed"
    check = 'require "sidekiq"; exit(Sidekiq::VERSION.start_with?("6.") ? 0 : 3)'
    probe = subprocess.run(["ruby", "-e", check], capture_output=True, timeout=60)
    if probe.returncode != 0:
        return f"the sidekiq 6.x gem is not loadable: {probe.stderr.decode()[-300:]}"
    return None


@pytest.fixture(scope="module")
def ruby():
    why = _ruby_sidekiq_missing()
    if why:
        if IN_CI:
            pytest.fail(f"{why}; CI must install ruby-sidekiq")
        pytest.skip(why)


def run_ruby(code: str, *argv: str) -> str:
    proc = subprocess.run(["ruby", "-e", code, *argv], capture_output=True, timeout=60)
    assert proc.returncode == 0, f"ruby failed ({proc.returncode}):\n{proc.stderr.decode()}"
    return proc.stdout.decode()


# --- the workers, on both sides ---------------------------------------------------------------

RUBY_PRELUDE = r'''
require "json"
require "sidekiq"
$stderr.reopen(File::NULL) # redis-rb 4.8 deprecation chatter
URL = ARGV[0]
CFG = ARGV[1] ? JSON.parse(ARGV[1]) : {}
Sidekiq.configure_client { |c| c.redis = {url: URL} }

class RbPlainWorker
  include Sidekiq::Worker
  def perform(*args); end
end

class RbOptsWorker
  include Sidekiq::Worker
  sidekiq_options queue: "critical", retry: 5, backtrace: 10, dead: false
  def perform(*args); end
end

class RbChildWorker < RbOptsWorker
  sidekiq_options tags: ["t1", "t2"], retry_queue: "later"
end
'''

# Every push below is mirrored line for line in python_pushes().
RUBY_PUSHES = r'''
NOW = CFG["now"]
JIDS = CFG["jids"].dup
module PinnedClock; def now; Time.at(NOW); end; end
Time.singleton_class.prepend(PinnedClock)
module PinnedJid; def hex(n = nil); JIDS.shift or raise("out of jids"); end; end
SecureRandom.singleton_class.prepend(PinnedJid)
ARGS = CFG["args"]

RbPlainWorker.perform_async("bob", 5)
RbPlainWorker.perform_async(*ARGS)
RbOptsWorker.perform_async("crit")
RbChildWorker.perform_async("child")
RbPlainWorker.set(queue: "setq", retry: 2).perform_async("set")
RbPlainWorker.set(queue: "setq", retry: 0, custom: {"k" => [1, 2]}).perform_async("set2")
RbPlainWorker.perform_in(300, "scheduled", 42)
RbPlainWorker.perform_in(-5, "past")
RbPlainWorker.perform_at(NOW + 3600, "perform_at")
RbPlainWorker.set(wait: 600).perform_async("wait")
RbOptsWorker.set(queue: "setq").perform_in(120, "setter_in")
Sidekiq::Client.push("class" => "RbPlainWorker", "args" => ["custom"], "tags" => ["alpha", "beta"],
                     "custom" => {"tenant" => 7, "trace" => "abc"}, "x_extra" => 1)
Sidekiq::Client.push("class" => "Some::RubyLessClass", "args" => [1], "queue" => "q", "retry" => false)
Sidekiq::Client.push("jid" => "0123456789abcdef01234567", "class" => "RbPlainWorker", "args" => [1],
                     "created_at" => NOW - 10)
Sidekiq::Client.push("class" => RbOptsWorker, "args" => [1], "queue" => "other")
Sidekiq::Client.push("class" => "RbPlainWorker", "args" => ["via_at"], "at" => NOW + 50)
Sidekiq::Client.push_bulk("class" => "RbPlainWorker", "args" => [[1, "b1"], [2, "b2"], [3, "b3"]], "queue" => "bulk")
Sidekiq::Client.push_bulk("class" => "RbPlainWorker", "args" => [["ba1"], ["ba2"]], "at" => NOW + 600)
Sidekiq::Client.push_bulk("class" => "RbPlainWorker", "args" => [["bb1"], ["bb2"]], "at" => [NOW + 100, NOW + 200])
RbPlainWorker.perform_bulk([[1], [2], [3]])
RbOptsWorker.set(queue: "low").perform_bulk([["x"], ["y"]])
'''


class RbPlainWorker(Job):
    def perform(self, *args):
        pass


class RbOptsWorker(Job):
    # timeout is queued-only: the worker reads it from the class; it never reaches the payload
    queued_options = {"queue": "critical", "retry": 5, "backtrace": 10, "dead": False, "timeout": 30}

    def perform(self, *args):
        pass


class RbChildWorker(RbOptsWorker):
    queued_options = {"tags": ["t1", "t2"], "retry_queue": "later"}


def python_pushes(now: float, args: list) -> None:
    c = client_mod.default_client()
    RbPlainWorker.perform_async("bob", 5)
    RbPlainWorker.perform_async(*args)
    RbOptsWorker.perform_async("crit")
    RbChildWorker.perform_async("child")
    RbPlainWorker.set(queue="setq", retry=2).perform_async("set")
    RbPlainWorker.set(queue="setq", retry=0, extra={"custom": {"k": [1, 2]}}).perform_async("set2")
    RbPlainWorker.perform_in(300, "scheduled", 42)
    RbPlainWorker.perform_in(-5, "past")
    RbPlainWorker.perform_at(now + 3600, "perform_at")
    RbPlainWorker.set(wait=600).perform_async("wait")
    RbOptsWorker.set(queue="setq").perform_in(120, "setter_in")
    c.push({"class": "RbPlainWorker", "args": ["custom"], "tags": ["alpha", "beta"],
            "custom": {"tenant": 7, "trace": "abc"}, "x_extra": 1})
    c.push({"class": "Some::RubyLessClass", "args": [1], "queue": "q", "retry": False})
    c.push({"jid": "0123456789abcdef01234567", "class": "RbPlainWorker", "args": [1],
            "created_at": now - 10})
    c.push({"class": RbOptsWorker, "args": [1], "queue": "other"})
    c.push({"class": "RbPlainWorker", "args": ["via_at"], "at": now + 50})
    c.push_bulk({"class": "RbPlainWorker", "args": [[1, "b1"], [2, "b2"], [3, "b3"]], "queue": "bulk"})
    c.push_bulk({"class": "RbPlainWorker", "args": [["ba1"], ["ba2"]], "at": now + 600})
    c.push_bulk({"class": "RbPlainWorker", "args": [["bb1"], ["bb2"]], "at": [now + 100, now + 200]})
    RbPlainWorker.perform_bulk([[1], [2], [3]])
    RbOptsWorker.set(queue="low").perform_bulk([["x"], ["y"]])


# JSON-native args that stress the encoder: big ints, 1.0 vs 1, unicode, escapes, nesting.
# (Floats of 1e16 and above are left out: Ruby prints 1.0e+16 where Python prints 1e+16.)
COMPLEX_ARGS = [1, -2, 1099511627776, 2**64 + 7, -(2**70), 1.0, -0.0, 3.14159, 0.1, 123456.789e3,
                "str", "", "ünïcødé ☃ 日本語 😀", 'q"uote \\ back/slash', "ctl \n\t\r\b\f \u0001\u001f \u007f",
                "\u2028\u2029", {"nested": {"a": [1, 2, {"b": None}], "sym": "symbol"}}, None, True,
                False, [], {}]


def dump_db(r: redis_lib.Redis) -> dict:
    """Every key with its type and exact content (lists in order, zsets with scores)."""
    out = {}
    for key in sorted(r.keys("*")):
        kind = r.type(key).decode()
        if kind == "list":
            value = r.lrange(key, 0, -1)
        elif kind == "zset":
            value = r.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = sorted(r.smembers(key))
        else:
            value = r.dump(key)
        out[key.decode()] = (kind, value)
    return out


def pin_python(monkeypatch, now: float, jids: list[str]) -> None:
    it = iter(list(jids))
    monkeypatch.setattr(client_mod, "clock", lambda: now)
    monkeypatch.setattr(client_mod, "new_jid", lambda: next(it))


def test_same_bytes_as_sidekiq_client(ruby, redis_url, r, default_client, monkeypatch):
    now = time.time()
    jids = [os.urandom(12).hex() for _ in range(200)]
    cfg = json.dumps({"now": now, "jids": jids, "args": COMPLEX_ARGS}, ensure_ascii=False)
    # json.dumps writes floats with repr() and Ruby's JSON.parse reads them back exactly
    assert json.loads(cfg)["now"] == now

    run_ruby(RUBY_PRELUDE + RUBY_PUSHES, redis_url, cfg)
    from_ruby = dump_db(r)
    r.flushall()

    pin_python(monkeypatch, now, jids)
    python_pushes(now, COMPLEX_ARGS)
    from_python = dump_db(r)

    assert list(from_python) == list(from_ruby)
    for key in from_ruby:
        assert from_python[key] == from_ruby[key], key

    # and the comparison was not vacuous: spot-check what both wrote
    assert from_ruby["queues"] == ("set", [b"bulk", b"critical", b"default", b"low", b"other",
                                           b"q", b"setq"])
    assert len(from_ruby["queue:default"][1]) == 8
    assert len(from_ruby["schedule"][1]) == 9
    first = json.loads(from_ruby["queue:default"][1][-1])
    assert list(first) == ["retry", "queue", "args", "class", "jid", "created_at", "enqueued_at"]
    assert first["args"] == ["bob", 5] and first["jid"] == jids[0]
    child = json.loads(from_ruby["queue:critical"][1][0])
    assert list(child)[:6] == ["retry", "queue", "backtrace", "dead", "tags", "retry_queue"]
    complex_args = from_ruby["queue:default"][1][-2]
    assert b',18446744073709551623,-1180591620717411303424,1.0,-0.0,' in complex_args
    assert "ünïcødé ☃ 日本語 😀".encode() in complex_args


RUBY_READ_API = r'''
require "sidekiq/api"
out = {}
Sidekiq::Queue.all.each do |q|
  out[q.name] = q.map { |j| [j.jid, j.klass, j.args, j.enqueued_at.to_f, j.created_at.to_f, j["retry"]] }
end
out["schedule"] = Sidekiq::ScheduledSet.new.map { |j| [j.jid, j.klass, j.args, j.at.to_f, j.queue] }
out["size"] = Sidekiq::Stats.new.enqueued
puts JSON.generate(out)
'''


def test_sidekiq_api_reads_what_queued_pushed(ruby, redis_url, default_client):
    class RbReadWorker(Job):
        queued_options = {"queue": "apiq", "retry": 3}

    try:
        jid1 = RbReadWorker.perform_async("a", 2**64, 1.0, "ünï")
        jid2 = RbReadWorker.perform_in(3600, "later")
        jids = RbReadWorker.perform_bulk([[1], [2]])
        seen = json.loads(run_ruby(RUBY_PRELUDE + RUBY_READ_API, redis_url))
    finally:
        from queued.job import registry
        registry.unregister("RbReadWorker")
    # Sidekiq::Queue iterates head (newest) to tail
    assert [j[0] for j in seen["apiq"]] == [jids[1], jids[0], jid1]
    assert seen["apiq"][2][1:3] == ["RbReadWorker", ["a", 2**64, 1.0, "ünï"]]
    assert seen["apiq"][2][5] == 3
    assert abs(seen["apiq"][2][3] - time.time()) < 60
    assert seen["apiq"][0][3] == seen["apiq"][1][3]  # one enqueued_at for the bulk
    assert seen["schedule"][0][0] == jid2 and seen["schedule"][0][4] == "apiq"
    assert 3500 < seen["schedule"][0][3] - time.time() <= 3600
    assert seen["size"] == 3


RUBY_UNPINNED = r'''
RbOptsWorker.perform_async("same", {"a" => 1})
Sidekiq::Client.push("class" => "RbPlainWorker", "args" => [1.0], "queue" => "plain", "extra" => nil)
'''


def test_unpinned_push_matches_key_order_and_values(ruby, redis_url, r, default_client):
    run_ruby(RUBY_PRELUDE + RUBY_UNPINNED, redis_url)
    RbOptsWorker.perform_async("same", {"a": 1})
    default_client.push({"class": "RbPlainWorker", "args": [1.0], "queue": "plain", "extra": None})
    for key in (b"queue:critical", b"queue:plain"):
        py_raw, rb_raw = r.lrange(key, 0, -1)  # head = the later push = Python's
        py, rb = json.loads(py_raw), json.loads(rb_raw)
        assert list(py) == list(rb)
        for field in ("jid", "created_at", "enqueued_at"):
            assert type(py[field]) is type(rb[field])
            py[field] = rb[field] = None
        assert py == rb
        if key == b"queue:plain":
            assert b'"args":[1.0]' in py_raw and b'"args":[1.0]' in rb_raw
