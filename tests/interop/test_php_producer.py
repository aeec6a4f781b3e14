"""A PHP producer (php-cli + phpredis) that writes Sidekiq's JSON by hand, a queued daemon runs.

PHP's ``json_encode`` defaults differ from Ruby's ``JSON.generate``: every non-ASCII character
is a ``\\uXXXX`` escape (emoji as surrogate pairs), ``/`` is written ``\\/``, integers are 64 bit
(2**70 is a float, written ``1.1805916207174113e+21``), and a PHP float with nothing after the
point loses it (``1.0`` is written ``1``, so every reader, Ruby's and queued's, sees the integer
1) unless the app passes ``JSON_PRESERVE_ZERO_FRACTION``. Payloads range from a full Sidekiq-style one to
the minimal ``{"class","args","jid"}`` (no queue, retry or created_at), pushed the way PHP apps
do it (``sAdd queues`` + ``lPush queue:default``) and scheduled with ``zAdd schedule``. queued
runs each once with the values PHP meant (what a JSON reader makes of PHP's bytes).
Missing php or its redis extension: skipped locally, a failure under CI.
"""
from __future__ import annotations

import json
from urllib.parse import urlparse

from harness import wait_for

from .realsidekiq import WIRE_REQUIRE, depth, runs_by_jid, typed, zentry

PRODUCER = r'''
[$host, $port, $db] = [$argv[1], (int)$argv[2], (int)$argv[3]];
$redis = new Redis();
$redis->connect($host, $port);
$redis->select($db);
function jid() { return bin2hex(random_bytes(12)); }

$deep = "bottom";
for ($i = 1; $i <= 50; $i++) { $deep = ($i % 2) ? [$deep] : ["k$i" => $deep]; }
$args = [PHP_INT_MAX, PHP_INT_MIN, 2 ** 70, 1, 1.0, 0.5, -1.5e-7, 1.0e20,
         "a\0b", "emoji 😀 ünïcødé ☃ 日本語", "a/b \"q\" \\ \n\t", $deep,
         new stdClass(), ["1" => 2, "" => 3], "", [], null, true, false];

$now = microtime(true);
$jobs = [
  "full" => ["class" => "InteropRecord", "args" => $args, "jid" => jid(), "queue" => "default",
             "retry" => true, "created_at" => $now, "enqueued_at" => $now],
  "minimal" => ["class" => "InteropRecord", "args" => ["minimal", 1.5, "😀/"], "jid" => jid()],
  "dies" => ["class" => "InteropFail", "args" => ["php-dead", "ünï/😀", 2.5], "jid" => jid(),
             "retry" => 0, "custom" => ["from" => "php"]],
  "zero_fraction" => ["class" => "InteropRecord", "args" => ["zero_fraction", 1.0, 1, -2.0],
                      "jid" => jid()],
];
foreach ($jobs as $name => $job) {
  $flags = $name == "zero_fraction" ? JSON_PRESERVE_ZERO_FRACTION : 0;
  $redis->sAdd('queues', 'default');
  $redis->lPush('queue:default', json_encode($job, $flags));
}
$at = time() + 1;
$jobs["scheduled"] = ["class" => "InteropRecord", "args" => ["scheduled", $args], "jid" => jid(),
                      "queue" => "default", "retry" => 3, "created_at" => $now];
$redis->zAdd('schedule', $at, json_encode($jobs["scheduled"]));
$jobs["scheduled_minimal"] = ["class" => "InteropRecord", "args" => ["scheduled_minimal"],
                              "jid" => jid()];
$redis->zAdd('schedule', $at, json_encode($jobs["scheduled_minimal"]));
echo json_encode(["jids" => array_map(fn($j) => $j["jid"], $jobs), "at" => $at]);
'''


def test_php_json_encode_payloads_run_with_the_values_php_meant(php, redis_url, r, daemon):
    # Given jobs a PHP app wrote with json_encode and phpredis (before queued runs, so the
    # exact bytes can be read back)
    url = urlparse(redis_url)
    out = json.loads(php(PRODUCER, url.hostname, url.port, url.path.strip("/") or 0).stdout)
    jids, at = out["jids"], out["at"]
    raw = {json.loads(m)["jid"]: m for m in r.lrange("queue:default", 0, -1)}
    raw.update((json.loads(m)["jid"], m) for m in r.zrange("schedule", 0, -1))
    assert set(raw) == set(jids.values())
    assert r.smembers("queues") == {b"default"}
    # (PHP's bytes: ASCII only, \uXXXX escapes with surrogate pairs, \/, 2**70 a float,
    # 1.0 written 1 unless JSON_PRESERVE_ZERO_FRACTION)
    full = raw[jids["full"]]
    assert max(full) < 0x80
    numbers = (b"[9223372036854775807,-9223372036854775808,1.1805916207174113e+21,1,1,0.5,"
               b"-1.5e-7,1.0e+20,")
    for piece in (b"\\ud83d\\ude00", b"\\u00fcn\\u00efc\\u00f8d\\u00e9", b"a\\/b", b"a\\u0000b",
                  numbers, b'{},{"1":2,"":3},"",[],null,true,false]'):
        assert piece in full, piece
    assert raw[jids["minimal"]].startswith(b'{"class":"InteropRecord","args":["minimal",1.5,'
                                           b'"\\ud83d\\ude00\\/"],"jid":"')
    assert b'"args":["zero_fraction",1.0,1,-2.0]' in raw[jids["zero_fraction"]]
    meant = {jid: json.loads(m) for jid, m in raw.items()}
    assert list(meant[jids["minimal"]]) == ["class", "args", "jid"]

    # When a queued daemon runs
    d = daemon(require=WIRE_REQUIRE)
    ok = [jids[n] for n in ("full", "minimal", "zero_fraction", "scheduled", "scheduled_minimal")]
    wait_for(lambda: set(runs_by_jid(r)) == set(ok) | {jids["dies"]} and r.zcard("dead") == 1,
             20, what="every PHP job to run")
    # (stopped before the runs are counted: a duplicate cannot come after the count, and a
    # job still held would be put back in its queue, where the end of the test looks)
    assert d.stop() == 0
    runs = runs_by_jid(r)

    # Then each ran once, from the default queue, with the args PHP meant, typed
    for jid in ok:
        (run,) = runs[jid]
        assert typed(run["args"]) == typed(meant[jid]["args"]), jid
        assert run["queue"] == "default" and run["class"] == "InteropRecord"
    args = runs[jids["full"]][0]["args"]
    assert args[:8] == [2**63 - 1, -2**63, float(2**70), 1, 1, 0.5, -1.5e-7, 1e20]
    assert [type(a) for a in args[2:6]] == [float, int, int, float]  # PHP's 1.0 arrives as 1
    assert args[8:11] == ["a\x00b", "emoji 😀 ünïcødé ☃ 日本語", 'a/b "q" \\ \n\t']
    assert depth(args[11]) == 50 and args[12:] == [{}, {"1": 2, "": 3}, "", [], None, True, False]
    assert runs[jids["minimal"]][0]["args"] == ["minimal", 1.5, "😀/"]
    assert typed(runs[jids["zero_fraction"]][0]["args"]) == typed(["zero_fraction", 1.0, 1, -2.0])
    # And the minimal payload reached the job as PHP wrote it: nothing invented
    assert typed(runs[jids["minimal"]][0]["msg"]) == typed(meant[jids["minimal"]])
    # And the scheduled ones ran from the schedule, not before their (integer) time, with
    # only enqueued_at added
    for name in ("scheduled", "scheduled_minimal"):
        run = runs[jids[name]][0]
        assert run["t"] >= at - 0.01, name
        assert typed(run["msg"]) == typed({**meant[jids[name]],
                                           "enqueued_at": run["msg"]["enqueued_at"]})
        assert isinstance(run["msg"]["enqueued_at"], float)
    # And the failing one (retry: 0) is in dead with PHP's keys and values, plus the failure
    # fields (the backtrace queued keeps by default among them), written the way Ruby writes
    # JSON (raw UTF-8, "/" unescaped)
    member, _ = zentry(r, "dead", jids["dies"])
    dead = json.loads(member)
    sent = meant[jids["dies"]]
    assert list(dead) == list(sent) + ["queue", "error_message", "error_class", "failed_at",
                                       "retry_count", "error_backtrace"]
    assert typed({k: dead[k] for k in sent}) == typed(sent)
    assert dead["args"] == ["php-dead", "ünï/😀", 2.5]
    assert (dead["queue"], dead["retry_count"], dead["error_message"]) == (
        "default", 0, "interop failure php-dead")
    assert '"args":["php-dead","ünï/😀",2.5]'.encode() in member
    assert r.llen("queue:default") == 0 and r.zcard("schedule") == r.zcard("retry") == 0
