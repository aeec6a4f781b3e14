"""queued's Python client pushes, the REAL Sidekiq 6.4 server (Debian's ``sidekiq``) runs.

``Job.perform_async``, ``set(queue:)``, ``perform_in``, ``perform_bulk`` and ``Client.push`` /
``push_bulk`` (with extra keys, with ``at``) reach a Ruby worker of the same name, which sees
the arguments Python sent (big integers, ``1`` vs ``1.0``, floats in every notation, unicode,
NUL, nesting). A server middleware re-encodes each job hash with ``Sidekiq.dump_json``: for
every job queued pushed straight to a queue that is byte for byte what queued wrote, i.e.
queued's JSON is exactly Ruby's. Missing ruby or sidekiq: skipped locally, a failure under CI.
"""
from __future__ import annotations

import json
import time

import pytest
from harness import wait_for

import queued

from . import realsidekiq
from .realsidekiq import ARGS, depth, runs_by_jid, typed

#: Floats where Python's repr and Ruby's Float#to_s differ (payload.dumps writes Ruby's form).
FLOATS = [1e15, 1e16, 1.5e16, 1234567890123456.0, 1234567890123456.5, 999999999999999.9,
          1e20, 1e22, 1e-05, 1.5e-07, 0.0001, 1e300, -1e300, 5e-324, 1.7976931348623157e308,
          -0.0, 0.1, 1.0, 123456789012345680.0]


class InteropRuby(queued.Job):
    """Pushed from Python; only the Ruby class of this name (realsidekiq.WORKERS_RB) runs."""

    def perform(self, *args):
        raise AssertionError("InteropRuby runs in Sidekiq, not here")


@pytest.fixture
def sidekiq(ruby, redis_url, r, tmp_path):
    yield from realsidekiq.servers(redis_url, r, tmp_path)


def test_python_pushes_run_on_real_sidekiq_with_the_args_python_sent(
        default_client, r, sidekiq):
    # Given jobs pushed by queued's client in every way it has
    now = time.time()
    sent = {
        InteropRuby.perform_async(*ARGS): ARGS,
        InteropRuby.set(queue="other").perform_async("other", 2**64, 1.0): ["other", 2**64, 1.0],
        InteropRuby.perform_in(1, "in", 1.0, -(2**65)): ["in", 1.0, -(2**65)],
        InteropRuby.perform_async("floats", FLOATS): ["floats", FLOATS],
        default_client.push({"class": "InteropRuby", "args": ["push", {"1": 2, "": 3}, {}],
                             "custom": {"tenant": 7}, "x_extra": 1, "tags": ["a", "b"]}):
            ["push", {"1": 2, "": 3}, {}],
    }
    bulk = [["bulk", 1], ["bulk", 1.0], ["bulk", ARGS]]
    sent.update(zip(InteropRuby.perform_bulk(bulk), bulk))
    bulk_at = [["bulk_at", 1], ["bulk_at", 2.0]]
    sent.update(zip(default_client.push_bulk({"class": "InteropRuby", "args": bulk_at,
                                              "at": now + 1}), bulk_at))
    # (what queued wrote, read back before Sidekiq takes it)
    written = {json.loads(m)["jid"]: m for q in (b"queue:default", b"queue:other")
               for m in r.lrange(q, 0, -1)}
    scheduled = {json.loads(m)["jid"]: (m, s) for m, s in r.zrange("schedule", 0, -1,
                                                                   withscores=True)}
    assert set(written) | set(scheduled) == set(sent) and len(scheduled) == 3

    # When the real Sidekiq server runs, with Ruby workers of the same name
    server = sidekiq()
    wait_for(lambda: set(runs_by_jid(r, "t:ruby")) == set(sent), 20,
             what="Sidekiq to run every job")
    assert server.stop() == 0, server.output()[-3000:]
    runs = runs_by_jid(r, "t:ruby")

    # Then Ruby ran each once, with the arguments Python sent, typed (Ruby's JSON.generate
    # wrote them back: 1 stays 1, 1.0 stays 1.0, big integers exact, NUL and emoji intact)
    for jid, args in sent.items():
        (run,) = runs[jid]
        assert typed(run["args"]) == typed(args), jid
    assert depth(runs[next(iter(sent))][0]["args"][13]) == 50
    # And Ruby's re-encoding of every job queued put in a queue is exactly queued's bytes
    payloads = {json.loads(p)["jid"]: p.encode() if isinstance(p, str) else p
                for p in r.lrange("t:ruby:payloads", 0, -1)}
    assert set(payloads) == set(sent)
    for jid, raw in written.items():
        assert payloads[jid] == raw, jid
    floats_job = next(j for j, a in sent.items() if a[0] == "floats")
    assert b"[1.0e+15,1.0e+16,1.5e+16,1.234567890123456e+15,1234567890123456.5," in (
        written[floats_job])
    # And the scheduled ones went through Sidekiq's poller: Python's payload plus enqueued_at
    for jid, (member, score) in scheduled.items():
        ruby_msg = json.loads(payloads[jid])
        assert typed(ruby_msg) == typed({**json.loads(member),
                                         "enqueued_at": ruby_msg["enqueued_at"]})
        assert ruby_msg["enqueued_at"] >= score - 0.01
    assert r.llen("queue:default") == r.llen("queue:other") == 0
    assert r.zcard("schedule") == r.zcard("retry") == r.zcard("dead") == 0


def test_payload_dumps_writes_floats_as_ruby_json_generate(ruby):
    # Given floats of every magnitude, in a payload queued re-encodes (retry, schedule, dead)
    from queued import payload
    doc = {"args": FLOATS + [float(10**k) for k in range(-8, 25)] + [1e15 + 0.5, -1e15],
           "s": ["1e+20", "x,1000000000000000.0]", 'q"1e-05']}
    # When Ruby parses queued's JSON and generates it again
    text = payload.dumps(doc)
    back = ruby('# encoding: utf-8\nrequire "json"; print JSON.generate(JSON.parse(ARGV[0]))',
                text).stdout
    # Then the bytes are the same, and both parse to the same floats
    assert back == text
    assert json.loads(text) == doc
