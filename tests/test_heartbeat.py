"""queued.server.heartbeat: Sidekiq's process record, batched stats, the lease and remote signals
(SIDEKIQ_FORMAT.md sections 6-7).

Work is simulated by writing to a real SlotTable with SlotWriter, exactly as workers do, and the
reserved zset is filled by a real Fetcher, so the ``:workers`` payload is what a worker holds.
"""
from __future__ import annotations

import json
import os
import re
import time

import pytest

from queued import config
from queued.server.fetch import Fetcher
from queued.server.heartbeat import PROCESS_TTL, STAT_TTL, Heartbeat, new_identity
from queued.keys import Keys
from queued.server.log import pid_tag
from queued.server.slots import SlotTable, SlotWriter

K = Keys()
IDENT = "myhost:4242:0123456789ab"
STARTED = 1795236015.7419145


def cfg():
    return config.from_dict({"concurrency": 2, "tag": "captag", "labels": ["blue", "eu"],
                             "queues": ["critical", "default"]})


@pytest.fixture
def hb(r):
    return Heartbeat(r, K, IDENT, cfg(), STARTED)


@pytest.fixture
def table():
    return SlotTable(2)


def days():
    """The UTC day now (and a second later, so a test run across midnight still passes)."""
    return {Keys.utc_day(), Keys.utc_day(time.time() + 1)}


def dated_total(r, name: str) -> int:
    """The sum of every dated ``stat:<name>:<day>`` key."""
    return sum(int(r.get(k)) for k in r.keys(f"stat:{name}:*"))


def work(writer: SlotWriter, ok: int, failed: int) -> None:
    for i in range(ok + failed):
        writer.begin(f"{i:024x}", "default", "X", None)
        writer.end(failed=i >= ok)


def test_new_identity_has_sidekiqs_shape(monkeypatch):
    monkeypatch.delenv("DYNO", raising=False)
    host, pid, nonce = new_identity().rsplit(":", 2)
    assert host and int(pid) == os.getpid() and re.fullmatch("[0-9a-f]{12}", nonce)
    monkeypatch.setenv("DYNO", "web.1")
    assert new_identity().startswith("web.1:")


def test_beat_writes_the_process_record(r, hb, table):
    # When a beat is written for an idle process
    before = time.time()
    signal_name = hb.beat(table.views(), False, 30_000)
    # Then processes has the identity and the hash has Sidekiq's fields, all strings
    assert signal_name is None
    assert r.smembers("processes") == {IDENT.encode()}
    h = r.hgetall(IDENT)
    assert set(h) >= {b"info", b"busy", b"beat", b"rtt_us", b"quiet", b"rss"}
    assert h[b"busy"] == b"0"
    assert h[b"quiet"] == b"false"
    assert before - 1 <= float(h[b"beat"]) <= time.time() + 1
    assert int(h[b"rtt_us"]) >= 0 and int(h[b"rss"]) > 0
    info = json.loads(h[b"info"])
    assert info["hostname"] == "myhost"
    assert info["started_at"] == STARTED
    assert info["pid"] == os.getpid()
    assert info["tag"] == "captag"
    assert info["concurrency"] == 2
    assert info["queues"] == ["critical", "default"]
    assert info["labels"] == ["blue", "eu"]
    assert info["identity"] == IDENT
    assert b" " not in h[b"info"]  # compact, like Ruby's JSON
    assert 0 < r.ttl(IDENT) <= PROCESS_TTL
    assert r.type(IDENT) == b"hash"


def test_beat_says_quiet(r, hb, table):
    hb.beat(table.views(), True, 30_000)
    assert r.hget(IDENT, "quiet") == b"true"


def test_beat_sets_the_lease_with_px(r, hb, table):
    hb.beat(table.views(), False, 4_321)
    ttl = r.pttl(K.lease(IDENT))
    assert 3_000 < ttl <= 4_321


def test_beat_flushes_the_counts_of_the_slot_table(r, hb, table):
    # Given two workers that ran 5 jobs, 2 of them failed
    table.reset(0, 100)
    table.reset(1, 101)
    work(SlotWriter(table, 0, 100), ok=2, failed=1)
    work(SlotWriter(table, 1, 101), ok=1, failed=1)
    # When the heartbeat runs
    hb.beat(table.views(), False, 30_000)
    # Then stat:* carry the totals (processed counts failures too) and the dated twins too
    assert r.get("stat:processed") == b"5"
    assert r.get("stat:failed") == b"2"
    (day,) = [d for d in days() if r.exists(f"stat:processed:{d}")]
    assert r.get(f"stat:processed:{day}") == b"5"
    assert r.get(f"stat:failed:{day}") == b"2"
    for name in ("processed", "failed"):
        assert STAT_TTL - 60 < r.ttl(f"stat:{name}:{day}") <= STAT_TTL


def test_a_second_beat_adds_only_the_new_counts(r, hb, table):
    table.reset(0, 100)
    w = SlotWriter(table, 0, 100)
    work(w, ok=3, failed=1)
    hb.beat(table.views(), False, 30_000)
    hb.beat(table.views(), False, 30_000)  # nothing new
    assert r.get("stat:processed") == b"4" and r.get("stat:failed") == b"1"
    work(w, ok=1, failed=2)
    hb.beat(table.views(), False, 30_000)
    assert r.get("stat:processed") == b"7"
    assert r.get("stat:failed") == b"3"
    # and the dated twins add up to the same (summed over every day, in case the beats fell
    # on both sides of midnight UTC)
    assert dated_total(r, "processed") == 7
    assert dated_total(r, "failed") == 3


def test_an_idle_beat_creates_the_stat_keys_at_zero(r, hb, table):
    hb.beat(table.views(), False, 30_000)
    assert r.get("stat:processed") == b"0" and r.get("stat:failed") == b"0"
    assert any(r.get(f"stat:failed:{d}") == b"0" for d in days())


def test_counts_survive_a_worker_respawn(r, hb, table):
    table.reset(0, 100)
    work(SlotWriter(table, 0, 100), ok=3, failed=0)
    hb.beat(table.views(), False, 30_000)
    table.reset(0, 200)  # the worker died, a new one takes the slot
    work(SlotWriter(table, 0, 200), ok=1, failed=0)
    hb.beat(table.views(), False, 30_000)
    assert r.get("stat:processed") == b"4"


def test_a_busy_slot_appears_in_workers(r, redis_url, hb, table):
    # Given worker 1 running a job it reserved
    raw = (b'{"retry":true,"queue":"default","args":[20,"sleepy \xc3\xa9"],"class":"SleepWorker",'
           b'"jid":"15acda24f01de58f49b27035","created_at":1795236014.9427643}')
    r.lpush("queue:default", raw)
    r.hset(K.masters, IDENT, "{}")  # its master's registration (reserve.lua checks)
    f = Fetcher(redis_url, K, IDENT, 1, ["default"], ["default"], True, 0.2, 15552000, 10000)
    try:
        (res,) = f.reserve(1)
    finally:
        f.close()
        f.redis.close()
    table.reset(0, 100)
    table.reset(1, 101)
    SlotWriter(table, 1, 101).begin("15acda24f01de58f49b27035", "default", "SleepWorker", None)
    # When the heartbeat runs
    hb.beat(table.views(), False, 30_000)
    # Then <identity>:workers has one field for that worker with Sidekiq's value shape
    workers = r.hgetall(f"{IDENT}:workers")
    assert list(workers) == [pid_tag(101).encode()]
    value = json.loads(workers[pid_tag(101).encode()])
    assert value["queue"] == "default"
    assert isinstance(value["payload"], str)
    assert value["payload"].encode() == raw  # the job JSON as a string, verbatim
    assert value["run_at"] == int(table.read(1).started_at)  # the job's start, in whole seconds
    assert r.hget(IDENT, "busy") == b"1"
    assert 0 < r.ttl(f"{IDENT}:workers") <= PROCESS_TTL


def test_workers_is_rewritten_each_beat(r, hb, table):
    table.reset(0, 100)
    w = SlotWriter(table, 0, 100)
    w.begin("a" * 24, "default", "X", None)
    hb.beat(table.views(), False, 30_000)
    assert r.hlen(f"{IDENT}:workers") == 1
    w.end(False)
    hb.beat(table.views(), False, 30_000)
    assert not r.exists(f"{IDENT}:workers")
    assert r.hget(IDENT, "busy") == b"0"


def test_a_remote_signal_is_popped_and_returned(r, hb, table):
    r.lpush(f"{IDENT}-signals", "TSTP")
    r.lpush(f"{IDENT}-signals", "TERM")
    assert hb.beat(table.views(), False, 30_000) == "TSTP"  # RPOP: the first one sent
    assert hb.beat(table.views(), False, 30_000) == "TERM"
    assert hb.beat(table.views(), False, 30_000) is None


def test_clear_leaves_processes_drops_workers_and_flushes_counts(r, hb, table):
    table.reset(0, 100)
    w = SlotWriter(table, 0, 100)
    work(w, ok=2, failed=0)
    w.begin("b" * 24, "default", "X", None)
    hb.beat(table.views(), False, 30_000)
    assert r.exists(f"{IDENT}:workers")
    w.end(True)  # the last job failed after the last beat
    hb.clear(table.views())
    assert IDENT.encode() not in r.smembers("processes")
    assert not r.exists(f"{IDENT}:workers")
    assert r.get("stat:processed") == b"3"
    assert r.get("stat:failed") == b"1"
    assert r.exists(IDENT)  # the hash expires by itself, as Sidekiq leaves it


def test_a_namespace_prefixes_every_key(r, table):
    k = Keys("ns")
    hb = Heartbeat(r, k, IDENT, cfg(), STARTED)
    r.lpush(f"ns:{IDENT}-signals", "TTIN")
    assert hb.beat(table.views(), False, 30_000) == "TTIN"
    assert r.smembers("ns:processes") == {IDENT.encode()}
    assert r.exists(f"ns:{IDENT}") and r.exists("ns:stat:processed")
    assert r.exists(f"ns:queued:lease:{IDENT}")
    assert not r.exists("processes") and not r.exists(IDENT)


def _reserve_all(redis_url, slot, payloads, r):
    r.lpush("queue:default", *payloads)
    r.hsetnx(K.masters, IDENT, "{}")  # its master's registration (reserve.lua checks)
    f = Fetcher(redis_url, K, IDENT, slot, ["default"], ["default"], True, 0.2, 15552000, 10000)
    try:
        return f.reserve(len(payloads))
    finally:
        f.close()
        f.redis.close()


def _running_payload(r, pid):
    return json.loads(r.hget(f"{IDENT}:workers", pid_tag(pid)))["payload"].encode()


def _running_after_a_beat(r, redis_url, hb, table, done, running) -> bytes:
    """Slot 0 (worker pid 100) reserved ``done`` then ``running`` and runs the job whose jid is
    b*24; one heartbeat later, the payload ``:workers`` shows for it."""
    _reserve_all(redis_url, 0, [done, running], r)
    table.reset(0, 100)
    SlotWriter(table, 0, 100).begin("b" * 24, "default", "X", None)
    hb.beat(table.views(), False, 30_000)
    return _running_payload(r, 100)


def test_workers_shows_the_running_job_of_a_batch_not_the_earliest(r, redis_url, hb, table):
    # Given a batch of two reserved jobs: the first finished (ack not yet out), the second runs
    done = b'{"class":"X","args":[1],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}'
    running = b'{"class":"X","args":[2],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb"}'
    # When the heartbeat runs, then :workers shows the running job
    assert _running_after_a_beat(r, redis_url, hb, table, done, running) == running


def test_workers_is_not_fooled_by_a_jid_inside_another_jobs_args(r, redis_url, hb, table):
    # Given a finished job that carries the running job's jid in its arguments (a callback
    # or a batch job naming another job), reserved before the running job
    done = (b'{"class":"Notify","args":[{"jid":"bbbbbbbbbbbbbbbbbbbbbbbb"}],'
            b'"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}')
    running = b'{"class":"X","args":[2],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb"}'
    assert _running_after_a_beat(r, redis_url, hb, table, done, running) == running


def test_workers_shows_what_a_slot_runs_even_when_its_reservation_is_gone(r, redis_url, hb, table):
    # Given a slot whose reserved zset holds another lane's job only (this lane's job was
    # acked a moment before its record turned idle)
    other = b'{"class":"Other","args":[1],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}'
    _reserve_all(redis_url, 0, [other], r)
    table.reset(0, 100)
    SlotWriter(table, 0, 100).begin("c" * 24, "default", "Mine", None)
    # When the heartbeat runs
    hb.beat(table.views(), False, 30_000)
    # Then :workers shows this lane's own job (its record's class and jid), not the other
    # lane's payload (RT7: one job shown on up to 9 lanes)
    assert json.loads(_running_payload(r, 100)) == {"class": "Mine", "args": [],
                                                     "jid": "c" * 24}
