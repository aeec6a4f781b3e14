"""Issue 21's keys written by Ruby's real Sidekiq client (Debian's sidekiq 6.4.1, which knows
nothing of them: ``sidekiq_options unique_for:`` is copied into the payload like any option):
a Ruby producer's unique jobs never run at once under queued, and a deadline Ruby writes
(``expires_at``) drops a job not started by then. Missing ruby or sidekiq: skipped locally, a
failure under CI."""
from __future__ import annotations

import json

from harness import counts, wait_for
from queued import unique
from queued.keys import Keys

import limitjobs as lj

RUBY = r'''# encoding: utf-8
require "json"
require "sidekiq"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.configure_client { |c| c.redis = {url: ARGV[0]} }
Sidekiq.logger.level = Logger::WARN

class Unique
  include Sidekiq::Worker
  sidekiq_options unique_for: 60, retry: 1
end

puts JSON.generate({
  "first" => Unique.perform_async("ruby", "g-ruby"),
  "second" => Unique.perform_async("ruby", "g-ruby"),
  "late" => Sidekiq::Client.push("class" => "Expiring", "args" => [],
                                 "expires_at" => Time.now.to_f - 1),
  "timely" => Sidekiq::Client.push("class" => "Expiring", "args" => [],
                                   "expires_at" => Time.now.to_f + 600),
})
'''


def test_a_ruby_producers_unique_jobs_never_run_at_once_and_its_deadlines_hold(
        ruby, redis_url, r, daemon):
    # Given jobs pushed by Sidekiq::Client: two copies of a unique job (Ruby's client cannot
    # drop the second: both are in the queue), one past its deadline, one well before it
    jids = json.loads(ruby(RUBY, redis_url).stdout.strip().splitlines()[-1])
    sent = {json.loads(m)["jid"]: json.loads(m) for m in r.lrange("queue:default", 0, -1)}
    assert sent[jids["first"]]["unique_for"] == 60 and len(sent) == 4
    # When a queued daemon of two workers runs them
    d = daemon(concurrency=2, require=("limitjobs.py",))
    # Then the late job is dropped unrun, counted; the timely one runs
    wait_for(lambda: counts(r, lj.DONE).get(jids["timely"]) == 1, 10, what="the timely job")
    wait_for(lambda: r.get(Keys().counter("expired")) == b"1", 10, what="the late one dropped")
    assert jids["late"] not in counts(r, lj.RUNS)
    # And of the two copies one runs and holds the lock, the other is put off, not run beside
    # it, and runs after it
    wait_for(lambda: len([j for j in (jids["first"], jids["second"])
                          if j in counts(r, lj.RUNS)]) == 1 and r.zcard("schedule") == 1,
             10, what="one copy running, the other put off")
    running = next(j for j in (jids["first"], jids["second"]) if j in counts(r, lj.RUNS))
    other = jids["second"] if running == jids["first"] else jids["first"]
    key = Keys().unique(unique.digest({"class": "Unique", "queue": "default",
                                       "args": ["ruby", "g-ruby"]}))
    assert r.get(key) == running.encode()
    r.set(lj.GATE + "g-ruby", 1)
    wait_for(lambda: counts(r, lj.DONE).get(other) == 1, 20, what="the other copy to run")
    order = [json.loads(m)["jid"] for m in r.lrange(lj.MSGS, 0, -1)
             if json.loads(m)["class"] == "Unique"]
    assert order == [running, other]
    wait_for(lambda: r.get(key) is None, 5, what="the lock given up")
    assert (r.zcard("retry"), r.zcard("dead")) == (0, 0)
    assert d.stop() == 0
