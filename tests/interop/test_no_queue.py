"""A job whose payload names no queue (``"queue": ""`` or ``null``), as Debian's Sidekiq 6.4.1
treats it and as queued does (docs/job-states.md, "Which queue a job goes back to"): Sidekiq's
client refuses it and fills in "default" only for a missing key, which queued follows; Sidekiq's
DeadSet retry takes such a job out and then raises, losing it, where queued leaves it in Dead.
Missing ruby or sidekiq: skipped locally, a failure under CI."""
from __future__ import annotations

import json

from queued.admin.api import Admin

from .sidekiq_support import ruby_json

RETRY_EACH = r'''
said = {}
Sidekiq::DeadSet.new.each do |e|
  begin
    e.retry
    said[e.jid] = "retried"
  rescue ArgumentError => ex
    said[e.jid] = ex.message
  end
end
pushed = begin; Sidekiq::Client.push("class" => "X", "args" => [], "queue" => ""); rescue ArgumentError => ex; ex.message; end
out(said: said, pushed: pushed, dead: Sidekiq::DeadSet.new.size,
    default: Sidekiq::Queue.new("default").map(&:jid))
'''


def dead_three(r) -> None:
    base = {"class": "X", "args": [], "error_class": "E", "error_message": "m", "retry_count": 0}
    r.zadd("dead", {json.dumps({**base, "jid": "empty", "queue": ""}): 1,
                    json.dumps({**base, "jid": "null", "queue": None}): 2,
                    json.dumps({**base, "jid": "absent"}): 3})


def test_sidekiq_refuses_a_job_that_names_no_queue_and_loses_it_where_queued_keeps_it(
        r, redis_url, ruby):
    # Given three dead jobs: "queue" "", null, and none at all
    dead_three(r)
    # When Sidekiq 6.4's API retries each, Then it refuses the two that name no queue as its
    # client refuses such a push, retries the one without a queue into "default", and the two
    # it refused are gone: taken out of Dead before the push raised
    got = ruby_json(ruby, RETRY_EACH, redis_url)
    refused = "Job must include a valid queue name"
    assert got["said"] == {"empty": refused, "null": refused, "absent": "retried"}
    assert got["pushed"] == refused
    assert got["dead"] == 0 and got["default"] == ["absent"]
    # Given the same three again, When queued's API retries every dead job
    r.flushdb()
    dead_three(r)
    left = []
    assert Admin(r).dead.retry_all(left=left) == 1
    # Then the same one goes to "default", and the two Sidekiq lost stay in Dead, said
    assert [json.loads(raw)["jid"] for raw in r.lrange("queue:default", 0, -1)] == ["absent"]
    assert sorted(json.loads(raw)["jid"] for raw in r.zrange("dead", 0, -1)) == \
        ["empty", "null"]
    assert sorted(e.entry.jid for e in left) == ["empty", "null"]
