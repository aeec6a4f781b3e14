"""Sidekiq's own Ruby API (Debian's sidekiq 6.4.1, ``sidekiq/api``) sees a queued daemon as one
of its processes: ProcessSet, Workers, Stats, Queue, RetrySet and DeadSet read what queued
writes, and ``Process#quiet!``/``#stop!`` control a queued master (SIDEKIQ_FORMAT.md 6 and 7).

Every Ruby script prints one ``RESULT <json>`` line; the assertions are made here in Python.
Missing ruby or sidekiq: skipped locally, a failure under CI.
"""
from __future__ import annotations

import json
import os
import socket
import time

import jobs
from harness import counts, wait_for

from .sidekiq_support import INTEROP_REQUIRE, ruby_json

HOST = os.environ.get("DYNO") or socket.gethostname()

READ_EVERYTHING = r'''
me = ARGV[1]
procs = Sidekiq::ProcessSet.new.to_a
stats = Sidekiq::Stats.new
queue = Sidekiq::Queue.new("default")
out(
  processes: procs.map { |p|
    {identity: p.identity, hostname: p["hostname"], pid: p["pid"], tag: p.tag,
     labels: p.labels, concurrency: p["concurrency"], queues: p.queues, busy: p["busy"],
     quiet: p["quiet"], stopping: p.stopping?, beat: p["beat"], rss: p["rss"],
     started_at: p["started_at"]}
  },
  total_concurrency: Sidekiq::ProcessSet.new.total_concurrency,
  workers_size: Sidekiq::Workers.new.size,
  works: Sidekiq::Workers.new.map { |process, tid, work|
    {process: process, tid: tid, queue: work["queue"], run_at: work["run_at"],
     class: work["payload"]["class"], args: work["payload"]["args"], jid: work["payload"]["jid"]}
  },
  stats: {processed: stats.processed, failed: stats.failed, enqueued: stats.enqueued,
          scheduled_size: stats.scheduled_size, retry_size: stats.retry_size,
          dead_size: stats.dead_size, processes_size: stats.processes_size,
          workers_size: stats.workers_size, default_queue_latency: stats.default_queue_latency,
          queues: stats.queues},
  queue: {size: queue.size, latency: queue.latency,
          jobs: queue.map { |j| {klass: j.klass, args: j.args, jid: j.jid,
                                 enqueued_at: j.enqueued_at.to_f} }},
  queue_names: Sidekiq::Queue.all.map(&:name).sort,
  scheduled: Sidekiq::ScheduledSet.new.map { |e| {klass: e.klass, args: e.args, at: e.at.to_f} },
  history: {processed: Sidekiq::Stats::History.new(2).processed,
            failed: Sidekiq::Stats::History.new(2).failed},
  now: Time.now.to_f,
)
'''


def test_process_set_workers_stats_and_queue_see_queued(daemon, producer, r, ruby):
    # Given a tagged queued daemon with one worker that has run jobs: 2 successes, one
    # failure that will be retried (in an hour) and one that died at once (retry 0)
    d = daemon(concurrency=1, tag="apitag", labels=["blue"], queues=["critical", "default"],
               require=INTEROP_REQUIRE)
    identity = d.identity()
    ok = [jobs.Record.perform_async("ok-1"), jobs.Record.perform_async("ok-2")]
    producer.push({"class": "ApiFailLate", "args": ["api"]})
    jobs.Hooks.perform_async(True)
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in ok)
             and r.zcard("retry") == 1 and r.zcard("dead") == 1, 15, what="the first jobs")
    # (the stats reach Redis with the master's next heartbeat, not per job)
    wait_for(lambda: r.get("stat:processed") == b"4" and r.get("stat:failed") == b"2", 5,
             what="the heartbeat flushing the stats")
    # And a long job is running (the worker is busy, so later pushes stay queued)
    sleeper = jobs.Sleep.perform_async(30, "api-sleep")
    wait_for(lambda: counts(r, jobs.RUNS).get(sleeper), 10, what="the long job to start")
    started = time.time()
    wait_for(lambda: r.hget(identity, "busy") == b"1", 5, what="a beat showing the busy job")
    waiting = [jobs.Record.perform_async("queued-1"), jobs.Record.perform_async("queued-2")]
    jobs.Record.perform_in(3600, "later")

    # When Sidekiq's Ruby API reads Redis
    got = ruby_json(ruby, READ_EVERYTHING, d.redis_url, identity)

    # Then ProcessSet lists queued's master with its info, busy 1 and not quiet
    assert [p["identity"] for p in got["processes"]] == [identity]
    (proc,) = got["processes"]
    assert proc["hostname"] == HOST and proc["pid"] == d.pid
    assert proc["tag"] == "apitag" and proc["labels"] == ["blue"]
    assert proc["concurrency"] == 1 and got["total_concurrency"] == 1
    assert proc["queues"] == ["critical", "default"]
    assert proc["busy"] == 1 and proc["quiet"] == "false" and proc["stopping"] is False
    assert abs(proc["beat"] - got["now"]) < 5 and proc["rss"] > 1000
    assert started - 60 < proc["started_at"] < started
    # And Workers shows the running job: class, args, jid, queue and an integer run_at
    assert got["workers_size"] == 1
    (work,) = got["works"]
    assert work["process"] == identity and work["tid"]
    assert (work["class"], work["args"], work["jid"], work["queue"]) == (
        "Sleep", [30, "api-sleep"], sleeper, "default")
    assert isinstance(work["run_at"], int) and abs(work["run_at"] - started) < 5
    # And Stats counts what ran (processed includes the failures, as in Sidekiq) and the sets
    stats = got["stats"]
    assert (stats["processed"], stats["failed"]) == (4, 2)
    assert (stats["enqueued"], stats["scheduled_size"], stats["retry_size"],
            stats["dead_size"], stats["processes_size"], stats["workers_size"]) == (
        2, 1, 1, 1, 1, 1)
    assert stats["queues"] == {"default": 2}
    assert "default" in got["queue_names"]
    # (and the per-UTC-day counters, for the dashboard's history graph: today and
    # yesterday, summed, in case the test straddles midnight UTC)
    today = time.strftime("%Y-%m-%d", time.gmtime(got["now"]))
    history = got["history"]
    assert today in history["processed"] and len(history["processed"]) == 2
    assert (sum(history["processed"].values()), sum(history["failed"].values())) == (4, 2)
    # And Queue reads the jobs queued's client pushed, oldest last, with their latency
    queue = got["queue"]
    assert queue["size"] == 2
    assert [(j["klass"], j["args"], j["jid"]) for j in queue["jobs"]] == [
        ("Record", ["queued-2"], waiting[1]), ("Record", ["queued-1"], waiting[0])]
    oldest = queue["jobs"][-1]["enqueued_at"]
    assert 0 < queue["latency"] <= got["now"] - oldest + 0.01
    assert queue["latency"] > got["now"] - oldest - 5
    assert 0 < stats["default_queue_latency"] < 30
    # And ScheduledSet reads queued's scheduled push
    (sched,) = got["scheduled"]
    assert (sched["klass"], sched["args"]) == ("Record", ["later"])
    assert 3590 < sched["at"] - got["now"] <= 3600


QUIET = r'''
me = ARGV[1]
target = Sidekiq::ProcessSet.new.find { |p| p.identity == me }
raise "queued process #{me} not listed" unless target
target.dump_threads
target.quiet!
out(stopping_before: target.stopping?, busy: target["busy"])
'''

STOP = r'''
me = ARGV[1]
target = Sidekiq::ProcessSet.new.find { |p| p.identity == me }
raise "queued process #{me} not listed" unless target
target.stop!
out(quiet: target["quiet"], stopping: target.stopping?, queue_size: Sidekiq::Queue.new.size)
'''


def test_quiet_and_stop_from_ruby_control_the_queued_master(daemon, producer, r, ruby):
    # Given a queued daemon running a job (until the test opens its gate)
    d = daemon(concurrency=2, shutdown_timeout=20)
    identity = d.identity()
    sleeper = jobs.Gate.perform_async("quiet-gate")
    wait_for(lambda: counts(r, jobs.RUNS).get(sleeper), 10, what="the job to start")
    wait_for(lambda: r.hget(identity, "busy") == b"1", what="a beat showing the busy job")
    # When Ruby calls Sidekiq::Process#dump_threads then #quiet! on it
    got = ruby_json(ruby, QUIET, d.redis_url, identity)
    assert got["stopping_before"] is False and got["busy"] == 1
    # Then the master takes both signals, in order, one per beat: it logs its workers (TTIN)
    # and goes quiet (TSTP), and its heartbeat says so
    log = d.wait_log("remote signal TSTP", 10)
    assert log.index("remote signal TTIN") < log.index("remote signal TSTP")
    assert f"running Gate jid={sleeper}" in log
    wait_for(lambda: r.hget(identity, "quiet") == b"true", what='quiet "true" in the beat')
    # And a job pushed now is not fetched (checked once the daemon has exited, below)
    later = jobs.Record.perform_async("after-quiet")
    # When Ruby sees the process as stopping and calls #stop!
    got = ruby_json(ruby, STOP, d.redis_url, identity)
    assert got["quiet"] == "true" and got["stopping"] is True
    # Then the master stops cleanly once its running job has finished, and leaves ProcessSet
    d.wait_log("remote signal TERM")
    assert d.proc.poll() is None and counts(r, jobs.DONE) == {}  # waiting for the job
    jobs.open_gate(r, "quiet-gate")
    assert d.wait(30) == 0
    assert "remote signal TERM" in d.output()
    assert identity.encode() not in r.smembers("processes")
    # And nothing was lost: the running job finished once, the later one waits in its queue
    assert counts(r, jobs.DONE) == {sleeper: 1}
    assert later not in counts(r, jobs.RUNS)
    assert [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)] == [later]
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    # And the last counts were flushed at exit, for Sidekiq::Stats
    assert r.get("stat:processed") == b"1" and r.get("stat:failed") == b"0"


RETRY_AND_DEAD = r'''
def entry(e)
  {klass: e.klass, display_class: e.display_class, args: e.args, jid: e.jid,
   queue: e.queue, error: e.error?, error_class: e["error_class"],
   error_message: e["error_message"], retry_count: e["retry_count"],
   failed_at: e["failed_at"], retried_at: e["retried_at"], retry: e["retry"],
   backtrace: e.error_backtrace, at: e.at.to_f}
end
retries = Sidekiq::RetrySet.new
dead = Sidekiq::DeadSet.new
seen = {retry: retries.map { |e| entry(e) }, dead: dead.map { |e| entry(e) },
        sizes: [retries.size, dead.size]}
retries.each(&:retry)
dead.each(&:retry)
seen[:sizes_after] = [Sidekiq::RetrySet.new.size, Sidekiq::DeadSet.new.size]
out(seen)
'''


def test_retry_and_dead_sets_read_and_retry_queued_failures(daemon, producer, r, ruby):
    # Given a daemon, a job that failed and waits in `retry` (its first retry an hour away),
    # and one pushed with retry: 0 that went straight to `dead`
    d = daemon(concurrency=2, require=INTEROP_REQUIRE)
    to_retry = producer.push({"class": "ApiFlaky", "args": ["r", 1], "backtrace": 3})
    to_dead = producer.push({"class": "ApiFlaky", "args": ["d", 2], "retry": 0})
    wait_for(lambda: r.zcard("retry") == 1 and r.zcard("dead") == 1, 10,
             what="one retry and one dead entry")
    # When Ruby's RetrySet and DeadSet read them, then retry each one
    got = ruby_json(ruby, RETRY_AND_DEAD, d.redis_url)
    # Then both read as Sidekiq jobs with queued's error fields
    assert got["sizes"] == [1, 1]
    (ret,), (dead,) = got["retry"], got["dead"]
    for e, jid, args in ((ret, to_retry, ["r", 1]), (dead, to_dead, ["d", 2])):
        assert (e["klass"], e["display_class"], e["args"], e["jid"], e["queue"]) == (
            "ApiFlaky", "ApiFlaky", args, jid, "default")
        assert e["error"] is True and e["error_class"] == "RuntimeError"
        assert e["error_message"] == f"flaky first run {args!r}"
        assert e["retry_count"] == 0 and e["retried_at"] is None
        assert abs(e["failed_at"] - time.time()) < 30
    assert ret["retry"] is True and dead["retry"] == 0
    assert 3600 <= ret["at"] - ret["failed_at"] < 3610  # retry_in + rand(10)
    # (backtrace: 3 -> Sidekiq decodes queued's zlib+base64 blob into three Ruby-style lines)
    # innermost first, as Ruby's: the raise, its caller, perform
    assert len(ret["backtrace"]) == 3
    assert all("interop_jobs.py" in line for line in ret["backtrace"]), ret["backtrace"]
    assert [line.rsplit(":in ", 1)[1] for line in ret["backtrace"]] == [
        "`refuse'", "`first_run'", "`perform'"]
    # (no backtrace option: queued's default, the job's own frames of the same stack, at
    # most 20, which Sidekiq decodes too)
    assert 1 <= len(dead["backtrace"]) <= 20 and dead["backtrace"][0] == ret["backtrace"][0]
    # And Ruby's retry moved both back to their queue, where queued ran them (successfully)
    assert got["sizes_after"] == [0, 0]
    wait_for(lambda: counts(r, jobs.DONE) == {to_retry: 1, to_dead: 1}, 10,
             what="both retried jobs to run")
    assert counts(r, jobs.RUNS) == {to_retry: 2, to_dead: 2}
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0 and r.llen("queue:default") == 0
    assert d.stop() == 0


BUSY_THREADS = r'''
me = ARGV[1]
target = Sidekiq::ProcessSet.new.find { |p| p.identity == me }
raise "queued process #{me} not listed" unless target
out(
  concurrency: target["concurrency"], busy: target["busy"],
  total_concurrency: Sidekiq::ProcessSet.new.total_concurrency,
  workers_size: Sidekiq::Workers.new.size,
  works: Sidekiq::Workers.new.map { |process, tid, work|
    {process: process, tid: tid, queue: work["queue"], run_at: work["run_at"],
     class: work["payload"]["class"], jid: work["payload"]["jid"]}
  },
)
'''


def test_sidekiqs_api_sees_each_job_of_a_threaded_process_on_its_thread(daemon, producer, r,
                                                                        ruby):
    # Given a queued master of 2 processes x 5 threads running 7 jobs (held by a gate)
    import threadjobs
    d = daemon(concurrency=2, threads=5, require=(*INTEROP_REQUIRE, "threadjobs.py"))
    identity = d.identity()
    held = threadjobs.Held.perform_bulk([["ruby-threads"]] * 7)
    wait_for(lambda: all(j in counts(r, jobs.RUNS) for j in held), 20, what="7 jobs running")
    wait_for(lambda: r.hget(identity, "busy") == b"7", 10, what="a beat showing 7 busy")
    # When Sidekiq's Ruby API reads Redis
    got = ruby_json(ruby, BUSY_THREADS, d.redis_url, identity)
    # Then ProcessSet shows 7 busy of the 10 jobs it runs at once, and Workers lists each
    # running job once, under a thread id of its own, in this process
    assert (got["concurrency"], got["busy"], got["total_concurrency"]) == (10, 7, 10)
    assert got["workers_size"] == 7 and len(got["works"]) == 7
    assert {w["process"] for w in got["works"]} == {identity}
    assert len({w["tid"] for w in got["works"]}) == 7
    assert sorted(w["jid"] for w in got["works"]) == sorted(held)
    assert {(w["class"], w["queue"]) for w in got["works"]} == {("Held", "default")}
    assert all(isinstance(w["run_at"], int) for w in got["works"])
    jobs.open_gate(r, "ruby-threads")
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in held), 10, what="done")
    assert d.stop() == 0
