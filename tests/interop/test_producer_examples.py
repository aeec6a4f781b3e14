"""The hand-written producers of docs/producers.md, run for real: docs/examples/push.php
(php-cli + phpredis) and docs/examples/push.js (Node + ioredis from npm, installed into
tests/interop/node by scripts/test). Run as scripts they push what their header says; called
from a program they push jobs a queued daemon runs once each with the values the producer
meant, on the queue asked for, at the time asked for, with payload keys of the producer's own;
with a key prefix (phpredis ``OPT_PREFIX``, ioredis ``keyPrefix``) a daemon with ``namespace:``
runs them. docs/producers.md shows the two files as they are. Missing php, phpredis, node or
ioredis: skipped locally, a failure under CI.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from harness import wait_for

from .conftest import NODE_MODULES
from .realsidekiq import WIRE_REQUIRE, runs_by_jid, typed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = {"php": os.path.join(ROOT, "docs", "examples", "push.php"),
            "node": os.path.join(ROOT, "docs", "examples", "push.js")}
DOC = os.path.join(ROOT, "docs", "producers.md")
NS = "myapp"

PHP_DRIVER = r'''
require $argv[1];
$url = parse_url($argv[2]);
$redis = new Redis();
$redis->connect($url['host'], $url['port']);
$redis->select((int) ltrim($url['path'], '/'));
if ($argv[3] !== '') { $redis->setOption(Redis::OPT_PREFIX, $argv[3] . ':'); }
$at = microtime(true) + 1;
echo json_encode([
  "now" => queued_push($redis, "InteropRecord",
                       [PHP_INT_MAX, 1.0, 1.5, "ünï 😀 a/b", ["k" => ["nested" => true]], [],
                        null, false]),
  "own" => queued_push($redis, "InteropRecord", ["own"],
                       ["queue" => "other", "retry" => 3, "tenant" => 7]),
  "at" => queued_push($redis, "InteropRecord", ["at"], ["at" => $at]),
  "at_time" => $at,
]);
'''

NODE_DRIVER = r'''
const Redis = require("ioredis");
const [example, url, ns] = process.argv.slice(1);
const { queuedPush } = require(example);
const redis = new Redis(url, ns ? { keyPrefix: `${ns}:` } : {});
(async () => {
  const at = Date.now() / 1000 + 1;
  const out = {
    now: await queuedPush(redis, "InteropRecord",
                          [Number.MAX_SAFE_INTEGER, 1.0, 1.5, "ünï 😀 a/b",
                           { k: { nested: true } }, [], null, false]),
    own: await queuedPush(redis, "InteropRecord", ["own"], { queue: "other", retry: 3, tenant: 7 }),
    at: await queuedPush(redis, "InteropRecord", ["at"], { at }),
    at_time: at,
  };
  console.log(JSON.stringify(out));
  await redis.quit();
})().catch((error) => { console.error(error); process.exit(1); });
'''

#: The "now" job's arguments as each language means them: Node has one number type, so its
#: 1.0 is written 1 (an int to every reader); PHP keeps 1.0 with JSON_PRESERVE_ZERO_FRACTION.
MEANT = {"php": [2**63 - 1, 1.0, 1.5, "ünï 😀 a/b", {"k": {"nested": True}}, [], None, False],
         "node": [2**53 - 1, 1, 1.5, "ünï 😀 a/b", {"k": {"nested": True}}, [], None, False]}


@pytest.fixture
def producer(request):
    """The language's runner (the php or node fixture), skipped or failed as it decides."""
    return request.getfixturevalue(request.param)


def _push(lang, run, redis_url, namespace) -> dict:
    driver = PHP_DRIVER if lang == "php" else NODE_DRIVER
    return json.loads(run(driver, EXAMPLES[lang], redis_url, namespace).stdout)


def _run_as_script(lang, redis_url) -> list[str]:
    """The example file run the way its header says, as a program of its own."""
    command = ["php" if lang == "php" else "node", EXAMPLES[lang]]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, "REDIS_URL": redis_url, "NODE_PATH": NODE_MODULES})
    return proc.stdout.split()


@pytest.mark.parametrize("producer", ["php", "node"], indirect=True)
def test_example_run_as_a_script_pushes_one_job_now_and_one_in_five_minutes(
        producer, request, redis_url, r):
    lang = request.node.callspec.params["producer"]
    before = time.time()
    now_jid, later_jid = _run_as_script(lang, redis_url)
    after = time.time()
    assert r.smembers("queues") == {b"default"}
    (raw,) = r.lrange("queue:default", 0, -1)
    job = json.loads(raw)
    assert list(job) == ["class", "args", "queue", "retry", "jid", "created_at", "enqueued_at"]
    assert (job["class"], job["args"], job["queue"], job["retry"], job["jid"]) == (
        "HardWorker", ["bob", 5], "default", True, now_jid)
    assert before - 1 <= job["created_at"] == job["enqueued_at"] <= after
    ((member, score),) = r.zrange("schedule", 0, -1, withscores=True)
    later = json.loads(member)
    assert list(later) == ["class", "args", "queue", "retry", "jid", "created_at"]
    assert (later["args"], later["jid"]) == (["later", 1], later_jid)
    assert int(before) + 300 <= score <= after + 300
    assert sorted(r.keys("*")) == [b"queue:default", b"queues", b"schedule"]


@pytest.mark.parametrize("namespace", ["", NS])
@pytest.mark.parametrize("producer", ["php", "node"], indirect=True)
def test_example_pushes_run_in_queued_with_the_values_meant(producer, request, namespace,
                                                             redis_url, r, daemon):
    lang = request.node.callspec.params["producer"]
    prefix = f"{namespace}:" if namespace else ""
    # Given the example's function called from a program: a job with tricky arguments now,
    # one on another queue with its own retry and a payload key of the program's own, one a
    # second from now
    jids = _push(lang, producer, redis_url, namespace)
    assert sorted(r.keys("*")) == [f"{prefix}{k}".encode() for k in
                                   ("queue:default", "queue:other", "queues", "schedule")]
    raw = r.lindex(f"{prefix}queue:default", 0)
    assert "ünï 😀 a/b".encode() in raw  # raw UTF-8 and "/" as it is, like Ruby's JSON
    # When a queued daemon (with the producer's namespace) runs them
    settings = {"namespace": namespace} if namespace else {}
    d = daemon(require=WIRE_REQUIRE, queues=["default", "other"], wait=False, **settings)
    wanted = {jids["now"], jids["own"], jids["at"]}
    wait_for(lambda: set(runs_by_jid(r)) == wanted, 20, what=f"the {lang} jobs to run")
    assert d.stop() == 0
    runs = {jid: rec for jid, (rec,) in runs_by_jid(r).items()}  # (each ran once)
    # Then each ran with the values the producer meant, where and when it asked
    assert typed(runs[jids["now"]]["args"]) == typed(MEANT[lang])
    assert runs[jids["now"]]["queue"] == "default"
    own = runs[jids["own"]]
    assert (own["queue"], own["args"], own["msg"]["retry"], own["msg"]["tenant"]) == (
        "other", ["own"], 3, 7)
    assert runs[jids["at"]]["t"] >= jids["at_time"] - 0.01
    assert r.zcard(f"{prefix}schedule") == r.zcard(f"{prefix}retry") == 0


def test_the_doc_shows_the_example_files_as_they_are():
    with open(DOC, encoding="utf-8") as f:
        blocks = re.findall(r"^```(php|js)\n(.*?)^```$", f.read(), re.M | re.S)
    for lang, path in (("php", EXAMPLES["php"]), ("js", EXAMPLES["node"])):
        with open(path, encoding="utf-8") as f:
            assert (lang, f.read()) in blocks, path
