"""queued.api against a real Redis: Sidekiq's numbers, queues, the job sets, processes, and
bulk actions that are atomic per job and bounded. (Real daemons and Ruby's Sidekiq::Stats are
in tests/integration/test_api_daemons.py and tests/interop/test_api_sidekiq.py.)"""
from __future__ import annotations

import json
import threading
import time

import pytest

from queued import api
from queued.keys import Keys

K = Keys()


def job(i, queue="default", **extra) -> bytes:
    msg = {"retry": True, "queue": queue, "class": extra.pop("klass", "HardJob"), "args": [i],
           "jid": f"{i:024x}", "created_at": 1795235935.0, "enqueued_at": 1795235935.5}
    msg.update(extra)
    return json.dumps(msg, separators=(",", ":")).encode()


def failed(i, **extra) -> bytes:
    fields = {"error_class": "Timeout::Error", "error_message": f"timed out {i}",
              "failed_at": 1795235936.0, "retry_count": 3, **extra}
    return job(i, **fields)


@pytest.fixture
def admin(r):
    return api.Admin(r)


# --- stats ------------------------------------------------------------------------------------

def test_stats_are_sidekiqs_numbers(r, admin):
    r.set("stat:processed", 15)
    r.set("stat:failed", 11)
    r.zadd("schedule", {job(1): time.time() + 60})
    r.zadd("retry", {failed(2): time.time() + 60, failed(3): time.time() + 90})
    r.zadd("dead", {failed(4): time.time()})
    r.sadd("queues", "default", "low")
    r.lpush("queue:default", job(5), job(6))
    r.lpush("queue:low", job(7, "low"))
    r.sadd("processes", "h:1:a", "h:2:b")
    r.hset("h:1:a", mapping={"busy": "2", "info": "{}"})
    r.hset("h:2:b", mapping={"busy": "1", "info": "{}"})
    now = time.time()
    stats = admin.stats()
    assert (stats.processed, stats.failed, stats.scheduled_size, stats.retry_size,
            stats.dead_size, stats.processes_size, stats.workers_size, stats.enqueued) == (
        15, 11, 1, 2, 1, 2, 3, 3)
    assert stats.queues == {"default": 2, "low": 1}
    # latency from the oldest default job's enqueued_at
    assert stats.default_queue_latency == pytest.approx(now - 1795235935.5, abs=5)


def test_latency_reads_sidekiq_8s_millisecond_timestamps(r, admin):
    r.lpush("queue:default", job(1, enqueued_at=int((time.time() - 30) * 1000)))
    assert admin.queue("default").latency() == pytest.approx(30, abs=2)
    assert admin.queue("empty").latency() == 0.0


def test_history_is_per_utc_day_newest_first(r, admin):
    day = 86400
    start = 1795235935.0
    r.set(f"stat:processed:{Keys.utc_day(start)}", 7)
    r.set(f"stat:failed:{Keys.utc_day(start - day)}", 2)
    assert admin.history(3, start=start) == [
        (Keys.utc_day(start), 7, 0), (Keys.utc_day(start - day), 0, 2),
        (Keys.utc_day(start - 2 * day), 0, 0)]


# --- queues -----------------------------------------------------------------------------------

def test_a_queue_pages_in_run_order_finds_and_deletes_a_job(r, admin):
    r.sadd("queues", "default")
    r.lpush("queue:default", *(job(i) for i in range(5)))  # job 0 runs first
    q = admin.queue("default")
    assert [e.jid for e in q.page(0, 2)] == [f"{0:024x}", f"{1:024x}"]
    assert [e.jid for e in q.page(2, 10)] == [f"{i:024x}" for i in (2, 3, 4)]
    entry = q.find(f"{3:024x}")
    assert entry.args == [3] and entry.queue == "default"
    assert q.delete(entry) is True and q.delete(entry) is False
    assert q.size() == 4


def test_clear_drops_the_queue_and_its_name(r, admin):
    r.sadd("queues", "default", "low")
    r.lpush("queue:low", job(1, "low"), job(2, "low"))
    assert admin.queue("low").clear() == 2
    assert not r.exists("queue:low") and r.smembers("queues") == {b"default"}


def test_pause_is_kept_where_sidekiq_pro_keeps_it(r, admin):
    q = admin.queue("low")
    assert q.pause() is True and q.pause() is False
    assert r.smembers("paused") == {b"low"} and q.paused() and admin.paused() == ["low"]
    assert q.unpause() is True and not q.paused() and admin.paused() == []


def test_a_namespace_prefixes_every_key(r):
    admin = api.Admin(r, namespace="ns")
    r.sadd("ns:queues", "default")
    r.lpush("ns:queue:default", job(1))
    r.zadd("ns:dead", {failed(2): 1.0})
    admin.queue("default").pause()
    assert admin.stats().enqueued == 1 and admin.dead.size() == 1
    assert r.smembers("ns:paused") == {b"default"} and not r.exists("paused")


# --- the job sets -----------------------------------------------------------------------------

def test_a_set_pages_finds_and_filters(r, admin):
    r.zadd("retry", {failed(i, klass="A" if i % 2 else "Billing::InvoiceJob"): 100.0 + i
                     for i in range(10)})
    assert [e.args for e in admin.retries.page(0, 3)] == [[0], [1], [2]]
    assert [e.args for e in admin.dead.page()] == []
    assert admin.retries.find(f"{7:024x}").score == 107.0
    where = api.Filter.of(klass="Billing::InvoiceJob", error="TIMED OUT")
    assert sorted(e.args[0] for e in admin.retries.scan(where)) == [0, 2, 4, 6, 8]
    assert [e.args for e in admin.retries.scan(api.Filter.of(arg="7"))] == [[7]]


def test_retry_now_puts_a_job_in_its_queue_once_as_sidekiq_does(r, admin):
    r.zadd("retry", {failed(1, queue="low"): time.time() + 99})
    entry = admin.retries.find(f"{1:024x}")
    before = time.time()
    assert admin.retries.retry(entry) is True
    assert admin.retries.retry(entry) is False  # gone: nothing twice
    (raw,) = r.lrange("queue:low", 0, -1)
    msg = json.loads(raw)
    assert msg["retry_count"] == 2  # one lower: its next failure counts this attempt again
    assert msg["enqueued_at"] >= before and r.smembers("queues") == {b"low"}
    assert r.zcard("retry") == 0


def test_a_dead_job_retried_by_hand_counts_a_kick(r, admin):
    r.zadd("dead", {failed(1): time.time()})
    admin.dead.retry(admin.dead.find(f"{1:024x}"))
    assert json.loads(r.rpop("queue:default"))["kick_count"] == 1


def test_a_scheduled_job_run_now_keeps_its_bytes(r, admin):
    raw = b'{"class": "X", "args": ["a\\/b"], "jid": "0123456789abcdef01234567"}'
    r.zadd("schedule", {raw: time.time() + 3600})
    admin.scheduled.retry(admin.scheduled.page()[0])
    (moved,) = r.lrange("queue:default", 0, -1)
    assert moved.startswith(raw[:-1]) and b'"enqueued_at":' in moved


def test_kill_delete_and_reschedule_one_job(r, admin):
    r.zadd("retry", {failed(1): 10.0, failed(2): 20.0, failed(3): 30.0})
    one, two, three = admin.retries.page()
    assert admin.retries.kill(one) is True
    assert r.zrange("dead", 0, -1) == [one.raw]
    assert admin.retries.delete(two) is True and admin.retries.delete(two) is False
    assert admin.retries.reschedule(three, 5000.0) is True
    assert r.zrange("retry", 0, -1, withscores=True) == [(three.raw, 5000.0)]
    with pytest.raises(ValueError):
        admin.dead.reschedule(admin.dead.page()[0], 1.0)


def test_retry_all_with_a_filter_acts_on_the_matches_only(r, admin):
    r.zadd("dead", {failed(i, klass="Billing::InvoiceJob" if i < 30 else "Other",
                           error_class="RuntimeError",
                           error_message="Timeout" if i % 3 == 0 else "nope"): float(i)
                    for i in range(60)})
    where = api.Filter.of(klass="Billing::InvoiceJob", error="timeout")
    assert admin.dead.retry_all(where) == 10
    queued = sorted(json.loads(x)["args"][0] for x in r.lrange("queue:default", 0, -1))
    assert queued == [i for i in range(30) if i % 3 == 0]
    assert admin.dead.size() == 50


def test_a_job_whose_queue_holds_another_type_is_left_where_it_was(r, admin):
    r.set("queue:broken", "x")
    r.zadd("dead", {failed(1, queue="broken"): 1.0, failed(2): 2.0})
    assert admin.dead.retry_all() == 1
    assert [e.args for e in admin.dead.page()] == [[1]] and r.llen("queue:default") == 1


def test_delete_all_without_a_filter_clears_the_set(r, admin):
    r.zadd("retry", {failed(i): float(i) for i in range(1200)})
    assert admin.retries.delete_all() == 1200 and not r.exists("retry")


def test_bulk_actions_racing_each_other_act_on_each_job_once(r, admin, redis_url):
    # Given 20,000 dead jobs, and two admins acting on them at once: one retries all, the
    # other deletes every one whose argument ends in 7
    n = 20_000
    r.zadd("dead", {failed(i): float(i) for i in range(n)})
    results = {}

    def run(name, fn):
        results[name] = fn()

    other = api.Admin(url=redis_url)
    t1 = threading.Thread(target=run, args=("retried", admin.dead.retry_all))
    t2 = threading.Thread(target=run, args=(
        "deleted", lambda: sum(other.dead.delete(e) for e in list(other.dead.scan())
                               if e.args[0] % 10 == 7)))
    t1.start()
    t2.start()
    t1.join()
    t2.join()
    # Then every job is in exactly one place: in its queue (once) or deleted, none in dead
    queued = [json.loads(x)["args"][0] for x in r.lrange("queue:default", 0, -1)]
    assert len(queued) == len(set(queued)) == results["retried"]
    assert results["retried"] + results["deleted"] == n
    assert r.zcard("dead") == 0


def test_a_kill_trims_dead_to_the_largest_bounds_the_live_daemons_publish(r):
    # Given 12,000 dead jobs, some 200 days old, and three jobs in retry
    now = time.time()
    r.zadd("dead", {failed(i): now - (i % 300) * 86400 - 1 for i in range(12_000)})
    r.zadd("retry", {failed(20_000 + i): now + 60 for i in range(3)})
    young = sum(1 for i in range(12_000) if (i % 300) < 180)

    def kill_one(admin):
        admin.retries.kill(admin.retries.page(0, 1)[0])

    # When no daemon publishes bounds: Sidekiq's, 180 days (and 10,000 jobs)
    snapshot = r.zrange("dead", 0, -1, withscores=True)
    kill_one(api.Admin(r))
    assert r.zcard("dead") == young + 1
    # When two live daemons publish theirs (and a Sidekiq process publishes none): the
    # largest count and the largest age, so no job some daemon keeps is trimmed
    r.delete("dead")
    r.zadd("dead", dict(snapshot))
    _process(r, "h:1:a", dead_max_jobs=20_000, dead_timeout_in_seconds=90 * 86400)
    _process(r, "h:2:b", dead_max_jobs=15_000, dead_timeout_in_seconds=400 * 86400)
    _process(r, "h:3:sidekiq")
    kill_one(api.Admin(r, dead_limits=api.DeadLimits(5, 5)))
    assert r.zcard("dead") == 12_001
    # When none is live, the operator's own bounds (queuedctl's config file); the count trim
    # keeps max_jobs - 1, as Sidekiq's does
    r.delete("processes")
    kill_one(api.Admin(r, dead_limits=api.DeadLimits(max_jobs=5_000, timeout=400 * 86400)))
    assert r.zcard("dead") == 4_999


def test_retry_all_reports_progress(r, admin):
    r.zadd("dead", {failed(i): float(i) for i in range(1500)})
    seen = []
    assert admin.dead.retry_all(progress=lambda examined, done: seen.append((examined, done))) \
        == 1500
    assert seen[-1] == (1500, 1500)
    assert all(a <= b for (a, _), (b, _) in zip(seen, seen[1:]))


# --- processes --------------------------------------------------------------------------------

def _process(r, identity, busy=1, quiet="false", **info):
    r.sadd("processes", identity)
    r.hset(identity, mapping={
        "info": json.dumps({"hostname": "h", "pid": 42, "concurrency": 4, "queues": ["default"],
                            "tag": "t", **info}),
        "busy": str(busy), "beat": "1795235935.5", "quiet": quiet, "rss": "31180",
        "rtt_us": "89"})


def test_processes_list_live_ones_and_signal_them_as_sidekiqs_api_does(r, admin):
    _process(r, "h:1:a")
    _process(r, "h:2:b", quiet="true", busy=0)
    r.sadd("processes", "h:3:gone")  # its record expired
    procs = admin.processes()
    assert [(p.identity, p.busy, p.is_quiet, p.rss_kb, p.concurrency) for p in procs] == [
        ("h:1:a", 1, False, 31180, 4), ("h:2:b", 0, True, 31180, 4)]
    procs[0].quiet()
    procs[0].stop()
    assert r.lrange("h:1:a-signals", 0, -1) == [b"TERM", b"TSTP"]
    assert 0 < r.ttl("h:1:a-signals") <= 60
    assert admin.signal_all("TTIN") == 2 and r.lrange("h:2:b-signals", 0, -1) == [b"TTIN"]
    with pytest.raises(ValueError):
        procs[0].signal("KILL")


def test_running_jobs_with_their_runtime(r, admin):
    _process(r, "h:1:a")
    payload = job(1).decode()
    r.hset("h:1:a:workers", "abc", json.dumps({"queue": "default", "payload": payload,
                                               "run_at": 1795235930}))
    (running,) = admin.running(now=1795235940.0)
    assert (running.identity, running.tid, running.queue, running.runtime) == (
        "h:1:a", "abc", "default", 10.0)
    assert running.entry.jid == f"{1:024x}" and running.entry.args == [1]


def test_queue_summaries_give_size_latency_and_pause_of_every_queue(r, admin):
    # Given two queues with jobs (the oldest default job enqueued 30 s ago) and a paused
    # queue that has none yet (so it is not in `queues`)
    now = time.time()
    r.sadd("queues", "default", "low")
    r.lpush("queue:default", job(1, enqueued_at=now - 30), job(2, enqueued_at=now - 5))
    r.lpush("queue:low", job(3, "low", enqueued_at=now - 2))
    admin.queue("later").pause()
    # Then each is listed by name with its size, its oldest job's wait and its pause
    got = [(q.name, q.size, round(q.latency), q.paused) for q in admin.queue_summaries(now)]
    assert got == [("default", 2, 30, False), ("later", 0, 0, True), ("low", 1, 2, False)]
    assert admin.queue_summaries(now)[0].as_dict() == {
        "name": "default", "size": 2, "latency": pytest.approx(30), "paused": False}


def test_a_queue_deletes_every_match_and_keeps_the_rest_in_order(r, admin):
    # Given a queue of 1,200 jobs of two classes
    r.sadd("queues", "default")
    r.lpush("queue:default", *(job(i, klass="Old" if i % 3 == 0 else "New")
                               for i in range(1200)))
    seen = []
    # When every Old job is deleted
    deleted = admin.queue("default").delete_all(
        api.Filter.of(klass="Old"), batch=150,
        progress=lambda examined, done: seen.append((examined, done)))
    # Then those went, the others stay in their order, and progress was told per batch read
    # (jobs examined, jobs deleted)
    assert deleted == 400 and seen == [(150 * k, 50 * k) for k in range(1, 9)]
    assert [e.args[0] for e in admin.queue("default").scan()] == [
        i for i in range(1200) if i % 3]
    # And with no filter it is the queue's clear
    assert admin.queue("default").delete_all() == 800 and r.smembers("queues") == set()


def test_a_set_or_queue_of_another_type_is_refused_and_left_as_it_was(r, admin):
    import redis as redis_lib
    r.set("dead", "not a zset")
    r.hset("queue:odd", "not", "a list")
    for act in (admin.dead.retry_all, admin.dead.delete_all,
                lambda: admin.queue("odd").delete_all(api.Filter.of(klass="X")),
                admin.queue("odd").clear):
        with pytest.raises(redis_lib.ResponseError):
            act()
    assert r.get("dead") == b"not a zset" and r.hgetall("queue:odd") == {b"not": b"a list"}
    assert r.keys("queued:snapshot:*") == []
    assert r.ttl("dead") == -1 and r.ttl("queue:odd") == -1
