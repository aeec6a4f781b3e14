"""Hooks inside a running daemon (tests/hookjobs.py): server middleware, lifecycle events,
error handlers, and the retry_in / retries_exhausted hooks on the master's own failure paths
(a job killed at its timeout, a poison pill)."""
import json
import os
import signal
import time

from harness import wait_for, zjobs, zmembers

HOOKS = ("hookjobs.py",)


def notes(r) -> list[dict]:
    return [json.loads(x) for x in r.lrange("t:hooks:notes", 0, -1)]


def of(r, jid) -> list[str]:
    """What ran for one job, in order."""
    return [n["what"] for n in notes(r) if n.get("jid") == jid]


def where(r, what) -> list[dict]:
    return [n for n in notes(r) if n["what"] == what]


def push(r, cls, *args, **options):
    """A job pushed by hand, as a producer writes it with the class's options (the test
    process does not register hookjobs' classes)."""
    jid = os.urandom(12).hex()
    r.sadd("queues", "default")
    r.lpush("queue:default", json.dumps({"class": cls, "args": list(args), "jid": jid,
                                         "queue": "default", "retry": 2, **options,
                                         "created_at": time.time()}))
    return jid


def test_server_middleware_wraps_stops_and_fails_jobs_in_a_running_daemon(daemon, r):
    d = daemon(require=HOOKS, concurrency=2)
    master = d.pid
    # When four jobs run: one plain, one the Gate middleware stops, one it refuses (raises),
    # one that fails in perform
    ok, skip, refuse, fail = (push(r, "HookJob", mode) for mode in ("ok", "skip", "refuse",
                                                                    "fail"))
    lengths = {ok: 5, skip: 3, refuse: 2, fail: 4}
    wait_for(lambda: all(len(of(r, j)) == n for j, n in lengths.items())
             and r.zcard("retry") == 2, 10, what="four jobs")  # (the handlers run first)
    # Then each ran through the chain in order, in a worker, as far as the chain let it
    assert of(r, ok) == ["outer:before", "inner:before", "perform", "inner:after",
                         "outer:after"]
    assert of(r, skip) == ["outer:before", "gate:skip", "outer:after"]
    assert of(r, refuse) == ["outer:before", "error_handler"]
    assert of(r, fail) == ["outer:before", "inner:before", "perform", "error_handler"]
    assert master not in {n["pid"] for n in notes(r) if n.get("jid") in lengths}
    assert {n["queue"] for n in where(r, "outer:before")} == {"default"}
    assert {n["job"] for n in where(r, "outer:before")} == {"HookJob"}
    # And a stopped chain is a job done; a raising middleware is the job's failure
    retry = {e["jid"]: e for e in zjobs(r, "retry")}
    assert set(retry) == {refuse, fail}
    assert (retry[refuse]["error_class"], retry[refuse]["error_message"]) == (
        "PermissionError", "the gate middleware refused this job")
    assert retry[fail]["error_class"] == "ValueError"
    assert {(n["jid"], n["outcome"], n["error"]) for n in where(r, "error_handler")} == {
        (refuse, "retry", "PermissionError"), (fail, "retry", "ValueError")}
    assert [n["count"] for n in where(r, "retry_in")] == [0, 0]
    assert r.llen("queue:default") == 0 and r.zcard("dead") == 0
    assert not r.keys("queued:reserved:*")
    assert d.stop() == 0
    assert int(r.get("stat:processed")) == 4 and int(r.get("stat:failed")) == 2


def test_lifecycle_events_fire_in_the_master_in_order(daemon, r):
    # Given a running daemon
    d = daemon(require=HOOKS, concurrency=2)
    wait_for(lambda: where(r, "heartbeat"), 5, what="a heartbeat event")
    # When it is quieted (TSTP), then stopped (TERM)
    d.signal(signal.SIGTSTP)
    wait_for(lambda: where(r, "quiet"), 5, what="the quiet event")
    assert d.stop() == 0
    # Then startup, heartbeats, quiet, heartbeats and shutdown fired, in that order, in the
    # master; startup before any worker was forked
    events = [n for n in notes(r) if n["what"] in ("startup", "quiet", "shutdown", "heartbeat")]
    assert {n["pid"] for n in events} == {d.pid}
    names = [n["what"] for n in events]
    squeezed = [x for i, x in enumerate(names) if i == 0 or names[i - 1] != x]
    assert squeezed == ["startup", "heartbeat", "quiet", "heartbeat", "shutdown"], names
    assert events[0]["children"] == 0
    assert events[-1]["children"] == 0  # shutdown: after the workers have left


def test_a_job_killed_at_its_timeout_with_retries_left_calls_retry_in_in_the_master(
        daemon, r):
    d = daemon(require=HOOKS, concurrency=1, timeout_grace=0.5)
    # When a job ignores its 0.3 s timeout (SIGALRM blocked) and its worker is killed
    jid = push(r, "WedgedJob")
    wait_for(lambda: where(r, "error_handler"), 10, what="the error handler")
    (entry,) = zmembers(r, "retry")  # written before the handlers run
    failed_at = json.loads(entry[0])["failed_at"]
    # Then the job's own retry_in gave the delay (plus Sidekiq's jitter, 0-9 s for a first
    # retry), asked in the master, and the error handlers heard of it there too
    msg = json.loads(entry[0])
    assert msg["jid"] == jid and msg["error_class"] == "JobTimeout" and msg["retry_count"] == 0
    assert 1000 <= entry[1] - failed_at <= 1009
    (asked,) = where(r, "retry_in")
    assert (asked["pid"], asked["job"], asked["count"], asked["error"]) == (
        d.pid, "WedgedJob", 0, "JobTimeout")
    (handled,) = where(r, "error_handler")
    assert (handled["pid"], handled["jid"], handled["outcome"], handled["error"]) == (
        d.pid, jid, "retry", "JobTimeout")
    assert where(r, "retries_exhausted") == []
    assert r.zcard("dead") == 0 and r.llen("queue:default") == 0
    assert d.stop() == 0


def test_a_poison_pill_with_dead_false_is_dropped_after_retries_exhausted_runs_once(
        daemon, r):
    d = daemon(require=HOOKS, concurrency=1, max_crashes=3)
    # When a job that kills its worker every time (dead: false, retries left) is pushed
    jid = push(r, "PoisonJob", dead=False)
    wait_for(lambda: where(r, "error_handler"), 10, what="the error handler")
    # Then after its third crash the master called retries_exhausted once, told the error
    # handlers it was dropped, and kept it nowhere (dead: false), however many retries left
    assert of(r, jid) == ["outer:before", "inner:before", "perform"] * 3 + [
        "retries_exhausted", "error_handler"]
    (exhausted,) = where(r, "retries_exhausted")
    assert (exhausted["pid"], exhausted["error"], exhausted["error_class"]) == (
        d.pid, "WorkerKilled", "WorkerKilled")
    (handled,) = where(r, "error_handler")
    assert (handled["pid"], handled["outcome"], handled["error"]) == (
        d.pid, "drop", "WorkerKilled")
    assert where(r, "retry_in") == []
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0 and r.llen("queue:default") == 0
    assert not r.keys("queued:reserved:*")
    assert d.stop() == 0
