"""Bad input in a queue: each element gets a clear log line and lands in dead (or in retry
where Sidekiq would retry), the daemon keeps serving the jobs around it, nothing is lost. An
element that is a JSON object goes to dead with its own keys kept and the failure fields added
(``error_class``, ``error_message``), so Sidekiq's Web UI and queued's tools show why; anything
else goes as it was written. A job without a ``jid`` runs, as Sidekiq's server runs it. Big
payloads run up to max_payload_bytes and are refused above it."""
import json
import re
import time

from faults import faultjobs
from faults.common import (JOBS, Tally, all_workers, done_count, held, log_lines, per_jid,
                           queued_jobs, report)

from harness import wait_for, zmembers

JID = "0123456789abcdef0123456{}"

# element -> the reason the log line gives. Not objects: to dead exactly as written.
UNUSABLE_RAW = {
    b"not json": "payload is not valid JSON",
    b"": "payload is not valid JSON",
    b"[1,2,3]": "payload is JSON list, not an object",
    b"null": "payload is JSON NoneType, not an object",
    b'"text"': "payload is JSON str, not an object",
    b'{"class":"Tick","args":["\xff\xfe"],"jid":"' + JID.format(5).encode() + b'"}':
        "payload is not valid UTF-8 (invalid start byte at byte 25)",
    b'\xc3\x28{"class":"Tick","args":[],"jid":"' + JID.format(6).encode() + b'"}':
        "payload is not valid UTF-8 (invalid continuation byte at byte 0)",
    # Python reads 1e400 as inf, which cannot be written back as JSON: it crashed the worker
    # on the failure path and then the master (a poison pill it could not encode)
    b'{"class":"Nope","args":[1e400],"jid":"' + JID.format(7).encode() + b'"}':
        "payload is not valid JSON: number 1e400 is out of range",
}
# JSON objects that are not usable jobs: to dead with their keys and the failure fields.
UNUSABLE_OBJECTS = {
    b'{"args":[],"jid":"' + JID.format(1).encode() + b'"}': 'payload has no "class" string',
    b'{"class":"Tick","jid":"' + JID.format(2).encode() + b'"}': 'payload has no "args"',
    b'{"class":"Tick","args":[],"jid":7}': 'payload "jid" is not a non-empty string',
    b'{"class":"Tick","args":"x","jid":"' + JID.format(3).encode() + b'"}':
        'payload "args" is str, not a list',
    b'{"class":"Tick","args":{"a":1},"jid":"' + JID.format(4).encode() + b'"}':
        'payload "args" is dict, not a list',
}
UNUSABLE = {**UNUSABLE_RAW, **UNUSABLE_OBJECTS}
# Unregistered classes: retried as Sidekiq retries a NameError. "\ud800" (a lone surrogate
# escape) crashed the worker when it became the process title.
UNKNOWN = {
    b'{"class":"Billing::NoSuchJob","args":[1],"jid":"' + JID.format(8).encode() + b'"}':
        "'Billing::NoSuchJob'",
    b'{"class":"\\ud800","args":[],"jid":"' + JID.format(9).encode() + b'"}': "'\\ud800'",
}
# What a hand-written producer may leave out: the jid. It runs, under a jid made from its
# bytes, with one log line for that producer's shape.
NO_JID = b'{"class":"Tick","args":[0]}'


def dead_entries(r) -> dict[bytes, bytes]:
    """dead's members by the element they came from: a JSON object's own keys (the failure
    fields left out), anything else as it is."""
    out = {}
    for member, _ in zmembers(r, "dead"):
        try:
            entry = json.loads(member)
        except ValueError:
            entry = None
        if isinstance(entry, dict) and entry.get("error_class") == "PayloadError":
            original = {k: v for k, v in entry.items() if k not in (
                "queue", "error_class", "error_message", "failed_at", "retry_count")}
            out[json.dumps(original, separators=(",", ":")).encode()] = member
        else:
            out[member] = member
    return out


def test_bad_elements_go_to_dead_or_retry_with_a_log_line_among_good_jobs(
        daemon, producer, r):
    # Given a running daemon (2 workers)
    d = daemon(require=JOBS, concurrency=2)
    workers = all_workers(d, 2)
    # When bad elements are pushed into its queue, with 50 good jobs before and after each
    good = []
    for raw in [*UNUSABLE, *UNKNOWN, NO_JID]:
        good += faultjobs.Tick.perform_bulk([[i] for i in range(50)])
        producer.push_raw("default", raw)
    good += faultjobs.Tick.perform_bulk([[i] for i in range(50)])
    # Then each unusable element is in dead: as written, or (a JSON object) with its own
    # keys and the reason
    wait_for(lambda: r.zcard("dead") == len(UNUSABLE) and r.zcard("retry") == len(UNKNOWN),
             15, what="dead and retry entries")
    dead = dead_entries(r)
    assert sorted(dead) == sorted(UNUSABLE)
    for raw, why in UNUSABLE_OBJECTS.items():
        entry = json.loads(dead[raw])
        assert (entry["error_class"], entry["error_message"], entry["queue"],
                entry["retry_count"]) == ("PayloadError", why, "default", 0), raw
    assert all(abs(s - time.time()) < 30 for _, s in zmembers(r, "dead"))
    # And each unregistered class is in retry as UnknownJobClass, like Sidekiq's NameError
    retried = [json.loads(m) for m, _ in zmembers(r, "retry")]
    assert sorted(e["jid"] for e in retried) == [JID.format(8), JID.format(9)]
    assert {e["error_class"] for e in retried} == {"UnknownJobClass"}
    assert all(e["retry_count"] == 0 for e in retried)
    # And the log says why, one line each
    out = d.output()
    for raw, why in UNUSABLE.items():
        lines = [x for x in log_lines(out, f"unusable payload sent to dead: {why}")
                 if x.endswith(": " + repr(raw))]
        assert len(lines) == 1, (why, raw, lines)
    for raw, name in UNKNOWN.items():
        assert len(log_lines(out, f"no job class named {name} is registered")) == 1, name
    # And every good job ran once, and the one without a jid too, with one line about its
    # producer; the same workers serve on; nothing else is anywhere
    wait_for(lambda: done_count(r) == len(good) + 1, 15, what="the good jobs")
    out = d.output()
    assert len(log_lines(out, 'a job without a "jid" (keys: class, args)')) == 1
    tally = Tally(r, good)
    assert tally.lost == set() and tally.twice == set()
    wait_for(lambda: held(r) == 0, 10, what="the acks")  # (they ride with the next call)
    assert queued_jobs(r) == 0
    assert set(d.worker_pids()) == workers
    assert "Traceback" not in out and "crashed" not in out
    assert d.stop() == 0
    bad = len(UNUSABLE) + len(UNKNOWN)
    report(f"{bad} bad elements in a queue ({len(UNUSABLE)} unusable: not JSON, empty, not an "
           "object, no class/args, a jid that is not a string, args not a list, invalid "
           "UTF-8, 1e400; 2 unregistered classes) and a job without a jid, 50 good jobs around "
           "each", len(good) + bad + 1,
           f"{len(tally.run)} good and the jid-less one; {len(UNUSABLE)} in dead (the JSON "
           f"objects with error_class and error_message), {len(UNKNOWN)} in retry",
           len(tally.lost), len(tally.twice),
           "at once: one log line each; no worker crashed")


def test_a_50_mb_payload_runs(daemon, producer, r):
    # Given a daemon with the default max_payload_bytes (64 MiB)
    d = daemon(require=JOBS, concurrency=2)
    # When a 50 MB job is pushed between ordinary jobs
    good = faultjobs.Tick.perform_bulk([[i] for i in range(50)])
    t0 = time.monotonic()
    big = faultjobs.Blob.perform_async("x" * 50_000_000)
    good += faultjobs.Tick.perform_bulk([[i] for i in range(50)])
    # Then it runs, with its whole argument, and so do the others
    wait_for(lambda: r.hget(faultjobs.SIZES, big) == b"50000000", 60, what="the big job")
    took = time.monotonic() - t0
    wait_for(lambda: done_count(r) == len(good) + 1, 15, what="every job")
    tally = Tally(r, good + [big])
    assert tally.lost == set() and tally.twice == set()
    assert r.zcard("dead") == 0 and r.zcard("retry") == 0
    wait_for(lambda: held(r) == 0, 5, what="no job held")
    assert d.stop() == 0
    report("a 50 MB payload (default max_payload_bytes: 64 MiB) among 100 ordinary jobs", 101,
           len(tally.run), len(tally.lost), len(tally.twice), f"ran {took:.1f} s after the push")


def test_a_payload_over_max_payload_bytes_is_refused_into_dead(daemon, producer, r):
    # Given a daemon with max_payload_bytes 1,000,000
    d = daemon(require=JOBS, concurrency=2, max_payload_bytes=1_000_000)
    # When a 2 MB job and a just-small-enough one are pushed between ordinary jobs
    good = faultjobs.Tick.perform_bulk([[i] for i in range(50)])
    big = faultjobs.Blob.perform_async("x" * 2_000_000)
    fits = faultjobs.Blob.perform_async("y" * 900_000)
    good += faultjobs.Tick.perform_bulk([[i] for i in range(50)])
    # Then the big one is in dead as it was, and the log names the size and the limit
    (member,) = wait_for(lambda: r.zrange("dead", 0, -1), 15, what="the big job in dead")
    assert json.loads(member)["jid"] == big and len(member) > 2_000_000
    lines = log_lines(d.output(), "over the max_payload_bytes limit of 1,000,000")
    assert len(lines) == 1 and re.search(
        r"unusable payload sent to dead: payload is 2,000,\d{3} bytes, over", lines[0])
    assert len(lines[0]) < 400  # the payload is not dumped into the log
    # And the rest run
    wait_for(lambda: done_count(r) == len(good) + 1, 15, what="the other jobs")
    assert r.hget(faultjobs.SIZES, fits) == b"900000"
    assert per_jid(r, faultjobs.STARTS)[big] == 0
    tally = Tally(r, good + [fits])
    assert tally.lost == set() and tally.twice == set()
    assert r.zcard("retry") == 0 and queued_jobs(r) == 0
    wait_for(lambda: held(r) == 0, 5, what="no job held")
    assert d.stop() == 0
    report("a 2 MB payload with max_payload_bytes: 1000000, among a 0.9 MB one and 100 "
           "ordinary jobs", 102, f"{len(tally.run)}; the 2 MB one in dead", len(tally.lost),
           len(tally.twice), "at once, with a log line naming the size and the limit")


def test_a_payload_nested_too_deep_to_parse_goes_to_dead_and_blocks_nothing(daemon, producer, r):
    """An element nested 100,000 deep: the JSON parser recurses past Python's limit. It
    crashed the worker, which put it back at the head of its queue, where it blocked every job
    behind it for ever; the operator's reads of it raised."""
    from queued import api
    deep = b"[" * 100_000 + b"]" * 100_000
    admin = api.Admin(url=producer.url)
    # Given a queue whose oldest element is such a payload (the Queues page reads its latency)
    producer.push_raw("default", deep)
    assert admin.queue("default").latency() == 0.0
    good = faultjobs.Tick.perform_bulk([[i] for i in range(20)])
    # When a daemon serves the queue
    d = daemon(require=JOBS, concurrency=1)
    # Then the payload is in dead as it came, with the reason logged, and every job behind it
    # ran once, with no worker crash
    wait_for(lambda: done_count(r) == len(good), 15, what="the jobs behind it")
    assert [m for m, _ in zmembers(r, "dead")] == [deep]
    assert len(log_lines(d.output(), "unusable payload sent to dead: payload nests deeper "
                                     "than the JSON parser reads")) == 1
    assert "Traceback" not in d.output() and "crashed" not in d.output()
    # And the operator's listing of dead shows it as an element that is no job
    (entry,) = admin.dead.page(0, 10)
    assert entry.raw == deep and entry.msg is None and entry.jid == ""
    assert d.stop() == 0
