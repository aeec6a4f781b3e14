"""A failure whose target key (retry, dead) holds another Redis type: the job is never lost.
It stays reserved, the condition is logged once, the rest of the daemon keeps working, and the
failure is written once the key is fixed. (fail.lua used to drop the reservation first and then
fail on the ZADD: the job was in neither place.)"""
import json

import jobs
from faults.common import held, log_lines, report

from harness import counts, wait_for

RETRY_BROKEN = "key retry holds another Redis type, not a sorted set (WRONGTYPE)"
HELD = "key retry holds another Redis type (WRONGTYPE): failed or released jobs stay reserved"
NOT_POLLED = RETRY_BROKEN + "; its due jobs wait"  # the scheduler's line


def reserved_members(r) -> list[bytes]:
    return [m for k in r.keys("queued:reserved:*") for m in r.zrange(k, 0, -1)]


def test_a_failure_to_a_broken_retry_key_stays_reserved_until_it_is_fixed(daemon, producer, r):
    # Given `retry` overwritten with a string
    r.set("retry", "oops")
    d = daemon(concurrency=2)
    # When a job with retries left fails, and other jobs come after it
    jid = jobs.Fail.perform_async("nope")
    wait_for(lambda: d.output().count(HELD) == 1, 10, what="the failure held")
    others = [jobs.Record.perform_async(i) for i in range(20)]
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in others), 10,
             what="the other jobs")
    # Then it ran once and is still reserved (not lost), marked so nobody runs it again
    assert counts(r, jobs.RUNS)[jid] == 1
    (member,) = reserved_members(r)
    assert json.loads(member.split(b"\0", 2)[2])["jid"] == jid
    assert r.get("retry") == b"oops" and r.zcard("dead") == 0
    # And each part of the daemon says so once: the workers holding failures, the scheduler
    # not polling the key
    assert len(log_lines(d.output(), HELD)) == 1
    assert len(log_lines(d.output(), NOT_POLLED)) == 1
    # When the key is fixed, the worker writes the failure (it retries every few seconds)
    r.delete("retry")
    entry = wait_for(lambda: r.zrange("retry", 0, -1), 15, what="the retry entry")
    # Then it is in retry exactly once, with its failure fields, and nowhere else
    (failed,) = [json.loads(m) for m in entry]
    assert (failed["jid"], failed["error_message"], failed["retry_count"]) == (jid, "nope", 0)
    assert reserved_members(r) == [] and r.llen("queue:default") == 0
    assert counts(r, jobs.RUNS)[jid] == 1
    assert d.stop() == 0
    report("`retry` is a string (SET); a job fails with retries left, 20 others follow",
           21, 21, 0, 0, "held reserved, logged once; written to retry once the key is fixed")


def test_an_unusable_payload_with_a_broken_dead_key_stays_reserved(daemon, producer, r):
    r.set("dead", "oops")
    d = daemon(concurrency=1)
    producer.push_raw("default", b"not json at all")
    wait_for(lambda: "key dead holds another Redis type" in d.output(), 10,
             what="the rejection held")
    assert [m.split(b"\0", 2)[2] for m in reserved_members(r)] == [b"not json at all"]
    nxt = jobs.Record.perform_async("after")
    wait_for(lambda: counts(r, jobs.DONE).get(nxt) == 1, 10, what="the next job")
    r.delete("dead")
    wait_for(lambda: r.zrange("dead", 0, -1) == [b"not json at all"], 15, what="dead entry")
    assert reserved_members(r) == [] and r.llen("queue:default") == 0
    assert d.stop() == 0


def test_a_timeout_kill_with_a_broken_dead_key_is_held_by_the_master(daemon, producer, r):
    # Given `dead` overwritten with a string, and a job that ignores its timeout (no retries)
    r.set("dead", "oops")
    d = daemon(concurrency=1, timeout_grace=0.3)
    jid = jobs.BlockAlarm.perform_async(30)
    # When the master kills its worker at timeout + grace
    wait_for(lambda: "stays reserved until the key is fixed" in d.output(), 10,
             what="the master's failure held")
    # Then the job stays reserved, the slot gets a new worker which serves other jobs
    (member,) = reserved_members(r)
    assert json.loads(member.split(b"\0", 2)[2])["jid"] == jid
    nxt = jobs.Record.perform_async("after")
    wait_for(lambda: counts(r, jobs.DONE).get(nxt) == 1, 10, what="the next job")
    # (its ack rides with the worker's next call: until then both are reserved)
    wait_for(lambda: [json.loads(m.split(b"\0", 2)[2])["jid"] for m in reserved_members(r)]
             == [jid], 10, what="only the held job reserved")
    # And once the key is fixed, the next heartbeat writes the failure
    r.delete("dead")
    (dead,) = wait_for(lambda: r.zrange("dead", 0, -1), 10, what="the dead entry")
    assert json.loads(dead)["error_class"] == "JobTimeout"
    assert reserved_members(r) == [] and counts(r, jobs.RUNS)[jid] == 1
    assert held(r) == 0
    assert d.stop() == 0
