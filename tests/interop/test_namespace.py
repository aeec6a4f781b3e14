"""``namespace:`` end to end: a daemon with ``namespace: ns`` serves what Ruby (Sidekiq's client
through redis-namespace, as Rails apps do it), PHP (phpredis with ``OPT_PREFIX``) and Python
producers write under ``ns:``, and writes no key outside the prefix (every write is watched
with Redis keyspace notifications, so a short-lived key counts too). Sidekiq's API, given the
same namespace, sees the queued process. Missing ruby, redis-namespace, php or phpredis:
skipped locally, a failure under CI.
"""
from __future__ import annotations

import json
import time
from urllib.parse import urlparse

import pytest

import queued
from harness import counts, wait_for

from .realsidekiq import WIRE_REQUIRE, runs_by_jid, zentry
from .sidekiq_support import require_ruby

NS = "ns"

RUBY_PUSH = r'''
require "json"
require "sidekiq"
require "redis/namespace"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.configure_client { |c| c.redis = {url: ARGV[0], namespace: ARGV[1]} }
Sidekiq.logger.level = Logger::WARN
class InteropRecord; include Sidekiq::Worker; end
class InteropFail; include Sidekiq::Worker; end
puts JSON.generate({"now" => InteropRecord.perform_async("ruby"),
                    "in" => InteropRecord.perform_in(1, "ruby-in"),
                    "dead" => InteropFail.set(retry: 0).perform_async("ruby-dead")})
'''

RUBY_API = r'''
require "json"
require "sidekiq"
require "sidekiq/api"
require "redis/namespace"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.configure_client { |c| c.redis = {url: ARGV[0], namespace: ARGV[1]} }
Sidekiq.logger.level = Logger::WARN
puts JSON.generate({"processes" => Sidekiq::ProcessSet.new.map { |p| p["identity"] },
                    "dead" => Sidekiq::DeadSet.new.map(&:jid).sort})
'''

PHP_PUSH = r'''
[$host, $port, $db, $ns] = [$argv[1], (int)$argv[2], (int)$argv[3], $argv[4]];
$redis = new Redis();
$redis->connect($host, $port);
$redis->select($db);
$redis->setOption(Redis::OPT_PREFIX, "$ns:");
function jid() { return bin2hex(random_bytes(12)); }
$now = microtime(true);
$jobs = [
  "now" => ["class" => "InteropRecord", "args" => ["php"], "jid" => jid(), "queue" => "default",
            "retry" => true, "created_at" => $now, "enqueued_at" => $now],
  "dead" => ["class" => "InteropFail", "args" => ["php-dead"], "jid" => jid(), "retry" => 0],
];
foreach ($jobs as $job) {
  $redis->sAdd('queues', 'default');
  $redis->lPush('queue:default', json_encode($job));
}
$jobs["in"] = ["class" => "InteropRecord", "args" => ["php-in"], "jid" => jid(),
               "queue" => "default", "created_at" => $now];
$redis->zAdd('schedule', time() + 1, json_encode($jobs["in"]));
echo json_encode(array_map(fn($j) => $j["jid"], $jobs));
'''


class Writes:
    """Every key any client writes while it runs (keyspace notifications, psubscribed)."""

    def __init__(self, r):
        self.r = r
        self.keys: set[str] = set()
        self.old = r.config_get("notify-keyspace-events")["notify-keyspace-events"]
        r.config_set("notify-keyspace-events", "KEA")
        self.pubsub = r.pubsub()
        self.pubsub.psubscribe(**{"__keyevent@*__:*": self._seen})
        self.thread = self.pubsub.run_in_thread(sleep_time=0.01, daemon=True)

    def _seen(self, message):
        self.keys.add(message["data"].decode())

    def close(self):
        self.thread.stop()
        self.thread.join(5)
        self.pubsub.close()
        self.r.config_set("notify-keyspace-events", self.old)


@pytest.fixture
def watch_writes(r):
    """``watch_writes()`` starts a Writes; it is closed at teardown."""
    started = []

    def start():
        started.append(Writes(r))
        return started[-1]

    yield start
    for w in started:
        w.close()


def php_push(php, url) -> dict:
    u = urlparse(url)
    return json.loads(php(PHP_PUSH, u.hostname, u.port, u.path.strip("/") or 0, NS).stdout)


def ruby_json(ruby, code, url) -> dict:
    return json.loads(ruby(code, url, NS).stdout.strip().splitlines()[-1])


def python_push(url) -> dict:
    c = queued.Client(url=url, namespace=NS)
    return {"now": c.push({"class": "InteropRecord", "args": ["python"]}),
            "in": c.push({"class": "InteropRecord", "args": ["python-in"],
                          "at": time.time() + 1}),
            "dead": c.push({"class": "InteropFail", "args": ["python-dead"], "retry": 0}),
            "crash": c.push({"class": "Crash", "args": ["kill", 1]})}


def identity_in(r, pid) -> str | None:
    for member in r.smembers(f"{NS}:processes"):
        if member.decode().split(":")[-2] == str(pid):
            return member.decode()
    return None


def test_a_namespaced_daemon_serves_every_producer_and_writes_only_under_its_prefix(
        ruby, php, redis_url, r, daemon, watch_writes):
    require_ruby('require "sidekiq"; require "redis/namespace"', "ruby-redis-namespace")
    # Given a job outside the namespace (another app's, on the same Redis)
    outside = json.dumps({"class": "InteropRecord", "args": ["outside"], "jid": "0" * 24})
    r.sadd("queues", "default")
    r.lpush("queue:default", outside)
    writes = watch_writes()  # from here on every write is seen
    # And jobs written under ns: by Ruby (redis-namespace), PHP (OPT_PREFIX) and Python: one
    # now, one a second later, one that fails to dead; and a Python job that kills its worker
    # once (its requeue goes back under the prefix)
    jids = {"ruby": ruby_json(ruby, RUBY_PUSH, redis_url), "php": php_push(php, redis_url),
            "python": python_push(redis_url)}
    assert r.zcard(f"{NS}:schedule") == 3 and r.llen(f"{NS}:queue:default") == 7
    # When a daemon with namespace: ns runs them
    d = daemon(require=WIRE_REQUIRE, namespace=NS, concurrency=2, wait=False)
    identity = wait_for(lambda: identity_in(r, d.pid), 15, what="the daemon's heartbeat")
    record = [j[k] for j in jids.values() for k in ("now", "in")]
    dead = sorted(j["dead"] for j in jids.values())
    crash = jids["python"]["crash"]
    wait_for(lambda: set(record) <= set(runs_by_jid(r)) and r.zcard(f"{NS}:dead") == 3
             and counts(r, "t:done").get(crash) == 1, 20, what="every job to run")
    # Then every job ran once; the failures are in ns:dead; Sidekiq's API (same namespace)
    # sees the queued process and the dead jobs
    runs = runs_by_jid(r)
    assert all(len(runs[j]) == 1 for j in record + dead)
    assert {runs[j][0]["args"][0] for j in record} == {
        f"{who}{when}" for who in jids for when in ("", "-in")}
    assert all(zentry(r, f"{NS}:dead", j) for j in dead)
    assert counts(r, "t:runs")[crash] == 2  # killed its worker once, requeued, ran again
    api = ruby_json(ruby, RUBY_API, redis_url)
    assert api == {"processes": [identity], "dead": dead}
    assert d.stop() == 0
    # And nothing outside the prefix was written (the jobs' own t: keys aside), the other
    # app's job is where it was, and everything under ns: is settled
    strays = {k for k in writes.keys if not k.startswith((f"{NS}:", "t:"))}
    assert strays == set()
    for key in (f"{NS}:queued:masters", f"{NS}:queued:lease:{identity}",
                f"{NS}:queued:scheduler-leader",
                f"{NS}:processes", f"{NS}:{identity}", f"{NS}:stat:processed",
                f"{NS}:queue:default", f"{NS}:schedule", f"{NS}:dead"):
        assert key in writes.keys, key
    assert any(k.startswith(f"{NS}:queued:reserved:{identity}:") for k in writes.keys)
    assert r.lrange("queue:default", 0, -1) == [outside.encode()]
    assert r.smembers("queues") == {b"default"}
    assert r.llen(f"{NS}:queue:default") == 0 and r.zcard(f"{NS}:schedule") == 0
    assert r.zcard(f"{NS}:retry") == 0 and not r.keys(f"{NS}:queued:reserved:*")
