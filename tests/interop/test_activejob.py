"""Rails ActiveJob (Debian's activejob 6.1) jobs enqueued through the Sidekiq adapter run on
queued: a Python job registered under the ActiveJob class's name runs with ActiveJob's
arguments unwrapped (``_aj_symbol_keys``/indifferent-access markers stripped, symbols as
strings, keyword arguments marked ``_aj_ruby2_keywords`` as Python keyword arguments), from the queue, another queue (``set(queue:)``) and the schedule
(``set(wait:)``); a failing one takes queued's retry path with Rails' JobWrapper payload kept,
so Sidekiq's API still shows it as the ActiveJob class and can retry it.

Missing ruby, sidekiq or activejob: skipped locally, a failure under CI.
"""
from __future__ import annotations

import json

import pytest
from harness import counts, wait_for

from .sidekiq_support import INTEROP_REQUIRE, require_ruby, ruby_json

WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
# Written by interop_jobs.PyHardJob in the daemon (not imported here: that would register its
# job classes in the test process too).
AJ_RUNS, DONE = "t:aj", "t:done"

ENQUEUE = r'''
require "active_job"
ActiveJob::Base.queue_adapter = :sidekiq
ActiveJob::Base.logger = Logger.new(nil)

class HardJob < ActiveJob::Base
  def perform(*args); end
end

def enqueue(job)
  {jid: job.provider_job_id, job_id: job.job_id}
end

started = Time.now.to_f
jobs = {
  plain: enqueue(HardJob.perform_later(1, "two", {a: 1, "b" => [2.5]}, :sym)),
  nested: enqueue(HardJob.perform_later(
    [:x, {y: [:z, nil, true, 2**70, 1.0]}],
    ActiveSupport::HashWithIndifferentAccess.new(k: "v"),
    "ünïcødé ☃", kw: :word)),
  other: enqueue(HardJob.set(queue: "other").perform_later("other-queue", 3)),
  later: enqueue(HardJob.set(wait: 1).perform_later("later")),
  fail: enqueue(HardJob.perform_later("fail", {deep: {sym: :v}})),
}
out(jobs: jobs, started: started,
    schedule: Sidekiq::ScheduledSet.new.map { |e| {jid: e.jid, at: e.at.to_f} })
'''

RETRY_VIEW = r'''
entries = Sidekiq::RetrySet.new.to_a
out(entries.map { |e| {klass: e.klass, display_class: e.display_class,
                       display_args: e.display_args, jid: e.jid} })
entries.each(&:retry)
'''


@pytest.fixture(scope="module")
def activejob():
    require_ruby('require "active_job"; require "active_job/queue_adapters/sidekiq_adapter"',
                 "ruby-activejob (Rails' ActiveJob with its Sidekiq adapter)")


def aj_runs(r) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for raw in r.lrange(AJ_RUNS, 0, -1):
        run = json.loads(raw)
        runs.setdefault(run["jid"], []).append(run)
    return runs


def test_activejob_jobs_run_on_queued_with_their_arguments_unwrapped(
        daemon, r, ruby, activejob, redis_url):
    # Given ActiveJob jobs enqueued by Rails through its Sidekiq adapter (before queued runs,
    # so what Rails wrote can be read back exactly)
    got = ruby_json(ruby, ENQUEUE, redis_url)
    jids = {name: j["jid"] for name, j in got["jobs"].items()}
    pushed = {json.loads(m)["jid"]: json.loads(m)
              for q in ("queue:default", "queue:other") for m in r.lrange(q, 0, -1)}
    assert set(pushed) == {jids["plain"], jids["nested"], jids["other"], jids["fail"]}
    for name, jid in jids.items():
        if name != "later":
            msg = pushed[jid]
            assert msg["class"] == WRAPPER and msg["wrapped"] == "HardJob"
            assert msg["args"][0]["job_class"] == "HardJob"
            assert msg["args"][0]["job_id"] == got["jobs"][name]["job_id"]
    # (Rails' own markers are on the wire: this is what queued must strip)
    assert pushed[jids["plain"]]["args"][0]["arguments"][2]["_aj_symbol_keys"] == ["a"]
    assert "_aj_ruby2_keywords" in pushed[jids["nested"]]["args"][0]["arguments"][-1]
    (sched,) = got["schedule"]
    assert sched["jid"] == jids["later"] and sched["at"] >= got["started"] + 0.9

    # When queued runs with a Python job registered as "HardJob", on both queues
    d = daemon(concurrency=2, require=INTEROP_REQUIRE, queues=["default", "other"])
    ok = [jids[n] for n in ("plain", "nested", "other", "later")]
    wait_for(lambda: all(counts(r, DONE).get(j) == 1 for j in ok) and r.zcard("retry") == 1,
             15, what="the ActiveJob jobs to run")
    runs = aj_runs(r)

    # Then each ran once, with ActiveJob's arguments as plain values
    expected = {
        "plain": [1, "two", {"a": 1, "b": [2.5]}, "sym"],
        "nested": [["x", {"y": ["z", None, True, 2**70, 1.0]}], {"k": "v"}, "ünïcødé ☃"],
        "other": ["other-queue", 3],
        "later": ["later"],
        "fail": ["fail", {"deep": {"sym": "v"}}],
    }
    for name, args in expected.items():
        (run,) = runs[jids[name]]
        assert run["args"] == args, name
        # Ruby keyword arguments (`kw: :word`) arrive as Python keyword arguments
        assert run["kwargs"] == ({"kw": "word"} if name == "nested" else {}), name
        assert (run["msg_class"], run["wrapped"]) == (WRAPPER, "HardJob"), name
        assert run["queue"] == ("other" if name == "other" else "default"), name
    assert isinstance(runs[jids["nested"]][0]["args"][0][1]["y"][4], float)
    # And the scheduled one went through the schedule, not before its time
    assert runs[jids["later"]][0]["at"] >= sched["at"]
    assert r.zcard("schedule") == 0

    # And the failing one is in `retry` with Rails' payload intact: still the JobWrapper,
    # with `wrapped` and ActiveJob's serialized arguments, plus Sidekiq's failure fields
    (member,) = r.zrange("retry", 0, -1)
    failed = json.loads(member)
    original = pushed[jids["fail"]]
    assert failed["class"] == WRAPPER and failed["wrapped"] == "HardJob"
    assert {k: failed[k] for k in original} == original
    assert (failed["error_class"], failed["error_message"], failed["retry_count"]) == (
        "RuntimeError", "hard job failed", 0)
    assert failed["args"][0]["arguments"][1]["deep"]["_aj_symbol_keys"] == ["sym"]

    # And Sidekiq's API shows it as the ActiveJob class; retried from Ruby, queued runs it
    # again, unwrapped the same way, and it fails back into `retry`, still wrapped
    (view,) = ruby_json(ruby, RETRY_VIEW, redis_url)
    assert (view["klass"], view["display_class"], view["jid"]) == (WRAPPER, "HardJob",
                                                                   jids["fail"])
    assert view["display_args"][0] == "fail"
    wait_for(lambda: len(aj_runs(r).get(jids["fail"], [])) == 2 and r.zcard("retry") == 1, 10,
             what="the retried ActiveJob job to run and fail again")
    assert aj_runs(r)[jids["fail"]][1]["args"] == expected["fail"]
    (member,) = r.zrange("retry", 0, -1)
    again = json.loads(member)
    assert again["class"] == WRAPPER and again["wrapped"] == "HardJob"
    assert again["args"] == original["args"] and again["jid"] == jids["fail"]
    assert again["retry_count"] == 0 and "retried_at" in again  # Ruby's retry did count - 1
    assert counts(r, DONE) == {j: 1 for j in ok}
    assert d.stop() == 0
