"""The process record Sidekiq's Web UI reads (SIDEKIQ_FORMAT.md section 6), and ps titles."""
import json
import os
import socket
import time

import jobs
from harness import counts, title, wait_for


def test_a_running_job_is_visible_in_the_heartbeat(daemon, producer, r):
    # Given a tagged daemon with two workers
    d = daemon(concurrency=2, tag="web", labels=["blue"])
    identity = d.identity()
    # When one long job runs (pushed raw, so its exact bytes are known; it runs until the
    # test opens its gate)
    payload = json.dumps({"retry": True, "queue": "default", "class": "Gate",
                          "args": ["hb"], "jid": "feedfacefeedfacefeedface",
                          "created_at": time.time(), "enqueued_at": time.time()},
                         separators=(",", ":"))
    r.sadd("queues", "default")
    r.lpush("queue:default", payload)
    wait_for(lambda: counts(r, jobs.RUNS).get("feedfacefeedfacefeedface"), what="job start")
    wait_for(lambda: r.hget(identity, "busy") == b"1", what="a beat with the busy job")
    started = time.time()
    # Then the process is listed, with its hash as Sidekiq writes it
    assert identity.encode() in r.smembers("processes")
    host, pid, nonce = identity.rsplit(":", 2)
    assert host == (os.environ.get("DYNO") or socket.gethostname())
    assert int(pid) == d.pid and len(nonce) == 12
    h = {k.decode(): v.decode() for k, v in r.hgetall(identity).items()}
    assert {"info", "busy", "beat", "rtt_us", "quiet", "rss"} <= set(h)
    info = json.loads(h["info"])
    assert {k: info[k] for k in ("hostname", "pid", "tag", "concurrency", "queues", "labels",
                                 "identity")} == {
        "hostname": host, "pid": d.pid, "tag": "web", "concurrency": 2,
        "queues": ["default"], "labels": ["blue"], "identity": identity}
    assert isinstance(info["started_at"], float) and started - 30 < info["started_at"] < started
    assert h["busy"] == "1" and h["quiet"] == "false"
    assert abs(float(h["beat"]) - time.time()) < 3
    assert int(h["rtt_us"]) >= 0 and int(h["rss"]) > 1000
    assert 0 < r.ttl(identity) <= 60
    # And <identity>:workers has one entry: queue, the payload as a JSON string (the exact
    # bytes pushed), an integer run_at, and the worker and pid its log lines carry
    workers = r.hgetall(f"{identity}:workers")
    assert len(workers) == 1
    (work,) = (json.loads(v) for v in workers.values())
    assert set(work) == {"queue", "payload", "run_at", "worker", "pid"}
    assert work["pid"] in d.worker_pids() and work["worker"] in ("w0", "w1")
    assert work["queue"] == "default"
    assert isinstance(work["payload"], str) and work["payload"] == payload
    assert isinstance(work["run_at"], int) and abs(work["run_at"] - time.time()) < 5
    assert 0 < r.ttl(f"{identity}:workers") <= 60
    # And ps shows the master's busy count and what the worker runs
    wait_for(lambda: d.title() == "queued 0.1.0 web [1 of 2 busy]", what="master title")
    worker_titles = [title(p) for p in d.worker_pids()]
    assert sorted(t.split(":")[-1].strip() for t in worker_titles) == ["Gate", "idle"]
    assert all(t.startswith("queued 0.1.0 web worker ") for t in worker_titles)
    # And once the job is done, the next beats say so
    jobs.open_gate(r, "hb")
    wait_for(lambda: counts(r, jobs.DONE).get("feedfacefeedfacefeedface") == 1,
             what="job end")
    wait_for(lambda: r.hget(identity, "busy") == b"0" and not r.exists(f"{identity}:workers"),
             what="an idle beat")
    wait_for(lambda: d.title() == "queued 0.1.0 web [0 of 2 busy]", what="idle title")
    assert d.stop() == 0


def beat_and_lease_expiry(r, identity) -> tuple[bytes, int]:
    """The last beat and the lease's expiry (ms, Redis's clock), read together: a beat writes
    both in one transaction, so they belong to the same beat."""
    pipe = r.pipeline(transaction=True)
    pipe.hget(identity, "beat")
    pipe.pexpiretime(f"queued:lease:{identity}")
    beat, expiry = pipe.execute()
    return beat, expiry


def test_the_heartbeat_renews_the_lease_and_registration(daemon, producer, r):
    d = daemon(lease_timeout=2)
    identity = d.identity()
    assert r.hexists("queued:masters", identity)
    # Every beat (0.5 s) renews the 2 s lease: each new beat pushes its expiry later, and
    # always before the previous expiry came (the lease never lapses)
    beat, expiry = beat_and_lease_expiry(r, identity)
    for _ in range(3):
        wait_for(lambda beat=beat: beat_and_lease_expiry(r, identity)[0] != beat,
                 what="the next beat")
        beat, renewed = beat_and_lease_expiry(r, identity)
        assert renewed > expiry  # renewed by this beat
        assert renewed - 2000 < expiry  # set (expiry minus its 2 s) while the old one lived
        assert r.pttl(f"queued:lease:{identity}") > 0
        expiry = renewed
    assert r.hexists("queued:masters", identity)
    assert d.stop() == 0
