"""``queuedctl`` and Ruby's Sidekiq (Debian's sidekiq 6.4) on one Redis: ``Sidekiq::Stats`` says
what ``queuedctl stats --json`` says, a queue queuedctl clears is empty for ``Sidekiq::Queue``,
and real Sidekiq processes show in ``queuedctl processes`` (busy count, quiet when Ruby's
``Process#quiet!`` quieted them) and their jobs in ``queuedctl running``.

Missing ruby or sidekiq: skipped locally, a failure under CI.
"""
from __future__ import annotations

import time

import jobs
import pytest
from ctlrun import ctl, ctl_json, ok, rows
from harness import counts, wait_for

from .realsidekiq import SidekiqServer
from .sidekiq_support import INTEROP_REQUIRE, ruby_json

#: A Ruby job that runs until the test opens its gate (the Ruby twin of tests/jobs.py Gate).
GATE_RB = r'''
class InteropGate
  include Sidekiq::Worker
  def perform(tag)
    Sidekiq.redis { |c| c.hincrby("t:ruby:started", tag, 1) }
    deadline = Time.now + 60
    sleep 0.02 until Sidekiq.redis { |c| c.get("t:gate:#{tag}") } || Time.now > deadline
  end
end
'''

STATS = r'''
s = Sidekiq::Stats.new
out(processed: s.processed, failed: s.failed, scheduled_size: s.scheduled_size,
    retry_size: s.retry_size, dead_size: s.dead_size, processes_size: s.processes_size,
    workers_size: s.workers_size, enqueued: s.enqueued,
    default_queue_latency: s.default_queue_latency, queues: s.queues)
'''


@pytest.fixture
def sidekiq(redis_url, r, tmp_path, ruby):
    """``sidekiq(queues)``: a real Sidekiq process that also runs InteropGate; SIGKILLed by
    PID at teardown if the test left it running."""
    started: list[SidekiqServer] = []

    def start(queues=("rubyq",), concurrency=2) -> SidekiqServer:
        server = SidekiqServer(redis_url, tmp_path, queues=queues, concurrency=concurrency)
        with open(server.workers, "a") as f:
            f.write(GATE_RB)
        started.append(server)
        return server.start(r)

    yield start
    for server in started:
        server.kill()


def gate(r, producer, tag: str, queue: str = "rubyq") -> str:
    """Push a Ruby InteropGate job and wait until Sidekiq runs it."""
    jid = producer.push({"class": "InteropGate", "queue": queue, "args": [tag]})
    wait_for(lambda: r.hget("t:ruby:started", tag), 15, what=f"Sidekiq to start {tag}")
    return jid


def test_sidekiq_stats_equal_queuedctl_stats(daemon, sidekiq, producer, r, ruby):
    # Given a queued daemon running one job and a Sidekiq process running two, each job
    # waiting for the test, and a Redis holding every kind of job (every count different,
    # so no two fields can be mixed up): 4 run, 3 of them failed, 5 scheduled, 1 retrying,
    # 2 dead, 6 waiting (5 in default)
    d = daemon(concurrency=1, require=INTEROP_REQUIRE)
    server = sidekiq(concurrency=2)
    ran = jobs.Record.perform_async("ok")
    producer.push({"class": "ApiFailLate", "args": ["retry-me"]})
    jobs.Hooks.perform_async(True)
    jobs.Hooks.perform_async(True)
    wait_for(lambda: counts(r, jobs.DONE).get(ran) and r.zcard("retry") == 1 and
             r.zcard("dead") == 2, 15, what="the first jobs")
    gated = jobs.Gate.perform_async("py")
    wait_for(lambda: counts(r, jobs.RUNS).get(gated), 10, what="queued's long job")
    gate(r, producer, "rb1")
    gate(r, producer, "rb2")
    for i in range(5):
        jobs.Record.perform_async(f"waiting-{i}")
        jobs.Record.perform_in(3600, f"later-{i}")
    producer.push({"class": "Later", "queue": "reports", "args": [1]})
    # (the counters and busy counts reach Redis with each process's heartbeat)
    wait_for(lambda: r.get("stat:processed") == b"4" and r.get("stat:failed") == b"3" and
             r.hget(d.identity(), "busy") == b"1" and
             r.hget(server.identity(r), "busy") == b"2", 15,
             what="both heartbeats with the counts")
    # When Ruby's Sidekiq::Stats and queuedctl stats --json read Redis
    ruby_stats = ruby_json(ruby, STATS, d.redis_url)
    ours = ctl_json("stats", url=d.redis_url)
    # Then they agree, field for field
    assert ruby_stats["processed"] == ours["processed"] == 4
    assert ruby_stats["failed"] == ours["failed"] == 3
    assert ruby_stats["scheduled_size"] == ours["scheduled"] == 5
    assert ruby_stats["retry_size"] == ours["retries"] == 1
    assert ruby_stats["dead_size"] == ours["dead"] == 2
    assert ruby_stats["processes_size"] == ours["processes"] == 2
    assert ruby_stats["workers_size"] == ours["busy"] == 3
    assert ruby_stats["enqueued"] == ours["enqueued"] == 6
    assert ruby_stats["queues"] == {name: q["size"] for name, q in ours["queues"].items()} \
        == {"default": 5, "reports": 1, "rubyq": 0}
    # (latency: the oldest default job's wait, read a moment apart)
    assert 0 < ruby_stats["default_queue_latency"] <= ours["default_latency"] < \
        ruby_stats["default_queue_latency"] + 5
    jobs.open_gate(r, "py")
    jobs.open_gate(r, "rb1")
    jobs.open_gate(r, "rb2")
    assert server.stop() == 0 and d.stop() == 0


def test_a_queue_queuedctl_clears_is_empty_for_sidekiq(r, redis_url, ruby):
    # Given a queue Ruby's client filled
    pushed = ruby_json(ruby, r'''
jids = 5.times.map { |i| Sidekiq::Client.push("class" => "ReportJob", "queue" => "reports",
                                               "args" => [i]) }
out(jids: jids, size: Sidekiq::Queue.new("reports").size)
''', redis_url)
    assert pushed["size"] == 5
    # Then queuedctl lists its jobs, next to run first
    listed = ctl_json("jobs", "queue:reports", url=redis_url)
    assert [j["jid"] for j in listed["jobs"]] == pushed["jids"]
    # When queuedctl clears it
    assert ok("clear", "reports", "--yes", url=redis_url) == (
        "cleared queue reports: 5 jobs deleted\n")
    # Then Sidekiq's API sees it empty and gone from the queue list
    after = ruby_json(ruby, r'''
out(size: Sidekiq::Queue.new("reports").size, names: Sidekiq::Queue.all.map(&:name),
    enqueued: Sidekiq::Stats.new.enqueued)
''', redis_url)
    assert after == {"size": 0, "names": [], "enqueued": 0}


QUIET_ALL = r'''
Sidekiq::ProcessSet.new.each(&:quiet!)
out(Sidekiq::ProcessSet.new.map(&:identity))
'''


def test_sidekiq_processes_and_their_jobs_show_and_quiet_from_ruby(sidekiq, producer, r,
                                                                  redis_url, ruby):
    # Given a real Sidekiq process running one Ruby job of its two threads
    server = sidekiq(concurrency=2)
    identity = server.identity(r)
    jid = gate(r, producer, "busy")
    wait_for(lambda: r.hget(identity, "busy") == b"1", 15, what="Sidekiq's beat saying busy")
    # Then queuedctl processes lists it with its busy count, not quiet
    (proc,) = ctl_json("processes", url=redis_url)
    assert (proc["identity"], proc["pid"], proc["busy"], proc["concurrency"],
            proc["queues"], proc["quiet"]) == (identity, server.proc.pid, 1, 2, ["rubyq"],
                                               False)
    (row,) = rows(ok("processes", url=redis_url))
    # (Sidekiq holds what it runs: its reserved is its busy count)
    assert row[0] == identity and row[3:7] == ["rubyq", "1/2", "1", "running"]
    # And queuedctl running shows its job (Sidekiq 6's payload, a JSON string)
    (work,) = ctl_json("running", url=redis_url)
    assert (work["identity"], work["jid"], work["class"], work["args"], work["queue"]) == (
        identity, jid, "InteropGate", ["busy"], "rubyq")
    assert abs(work["run_at"] - time.time()) < 30
    # (a Sidekiq process: its pid, and its thread id as the worker)
    (running,) = rows(ok("running", url=redis_url))
    assert running[:6] == [identity, str(work["pid"]), work["worker"], jid, "rubyq",
                           "InteropGate"]
    assert work["pid"] == int(identity.split(":")[1]) and work["worker"] == work["tid"]
    assert ctl("ping", "--queue", "rubyq", url=redis_url).returncode == 0
    # When Ruby quiets every process with Sidekiq's API
    assert ruby_json(ruby, QUIET_ALL, redis_url) == [identity]
    # Then queuedctl shows it quiet (from its next heartbeat on), and ping says so
    wait_for(lambda: ctl_json("processes", url=redis_url)[0]["quiet"], 20,
             what="queuedctl processes to show Sidekiq quiet")
    assert rows(ok("processes", url=redis_url))[0][6] == "quiet"
    probe = ctl("ping", "--queue", "rubyq", url=redis_url)
    assert probe.returncode == 1 and "is quiet" in probe.stderr
    jobs.open_gate(r, "busy")
    assert server.stop() == 0
