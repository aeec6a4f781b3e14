"""A task filled from Ruby: Debian's real Sidekiq 6.4 client pushes jobs with the documented
payload field ``task_id`` (``Sidekiq::Client.push`` and ``push_bulk``) into an open task that
``queuedctl new-task`` made; ``queuedctl task ID --seal --total N`` seals it; a queued daemon
runs them; the task knows the fate of every one and its callback runs once. And a Python
task's job for a Ruby class is a valid Sidekiq job: real Sidekiq runs it (untracked).

Missing ruby or sidekiq: skipped locally, a failure under CI.
"""
from __future__ import annotations

import json

from taskjobs import CALLBACKS

from queued.task import Task

from ctlrun import ok
from harness import wait_for

from .realsidekiq import SidekiqServer
from .sidekiq_support import ruby_json

#: ARGV: redis URL, task id. Five jobs that finish and one business failure, the Ruby way.
PUSH_INTO_TASK = r'''
tid = ARGV[1]
jids = [
  Sidekiq::Client.push("class" => "TOk", "args" => [1, 0], "task_id" => tid),
  Sidekiq::Client.push("class" => "TOk", "args" => [2, 0], "queue" => "imports",
                       "task_id" => tid),
  Sidekiq::Client.push("class" => "TBusiness", "args" => [3, 0], "task_id" => tid),
  *Sidekiq::Client.push_bulk("class" => "TOk", "args" => [[4, 0], [5, 0], [6, 0]],
                             "task_id" => tid),
]
out(jids)
'''

#: A Ruby job that records the task_id it was given (real Sidekiq runs a task's job).
RUBY_RECORDER = r'''
class RubyTaskJob
  include Sidekiq::Worker
  def perform(n)
    Sidekiq.redis { |c| c.rpush("t:ruby:ran", JSON.generate([n, jid])) }
  end
end
'''


def test_ruby_pushes_into_an_open_task_and_queued_runs_and_tracks_every_job(
        ruby, redis_url, r, daemon, producer):
    # Given an open task made from the shell, with a callback
    tid = ok("new-task", "import from ruby", "--on-complete", "TComplete",
             url=redis_url).strip()
    # When a Ruby app pushes six jobs into it with task_id, and the shell seals it for six
    jids = ruby_json(ruby, PUSH_INTO_TASK, redis_url, tid)
    assert len(set(jids)) == 6
    assert ok("task", tid, "--seal", "--total", "6", url=redis_url) == \
        f"sealed task {tid} (total 6)\n"
    # Then nothing completes before the jobs run (they join as they start)
    assert Task.find(tid).progress()["complete"] is False
    # When a queued daemon serving both queues runs them
    daemon(require=("taskjobs.py",), queues=["default", "imports"], concurrency=2)
    wait_for(lambda: r.llen(CALLBACKS) >= 1, 30, what="the task's on_complete")
    # Then every job's fate is known and the callback ran once, with the summary
    task = Task.find(tid)
    progress = task.progress()
    assert (progress["total"], progress["finished"], progress["failed"],
            progress["complete"]) == (6, 5, 1, True)
    assert {j["jid"] for j in task.jobs()} == set(jids)
    failed = list(task.jobs("failed"))
    assert [(f["jid"], f["class"], f["args"]) for f in failed] == [(jids[2], "TBusiness", [3, 0])]
    assert "product 3 rejected" in failed[0]["error"]["message"]
    ((kind, task_id, summary),) = [json.loads(c) for c in r.lrange(CALLBACKS, 0, -1)]
    assert (kind, task_id, summary["total"], summary["success"]) == \
        ("complete", tid, 6, False)


def test_a_python_tasks_job_for_a_ruby_class_runs_on_real_sidekiq(
        ruby, redis_url, r, tmp_path, producer):
    # Given a Python task of three jobs of a Ruby class, on the queue Sidekiq serves
    task = Task("for ruby")
    with task:
        pushed = [producer.push({"class": "RubyTaskJob", "queue": "rubyq", "args": [n]})
                  for n in range(3)]
    assert all(json.loads(m)["task_id"] == task.id for m in r.lrange("queue:rubyq", 0, -1))
    # When real Sidekiq runs that queue
    server = SidekiqServer(redis_url, tmp_path, queues=("rubyq",), concurrency=2)
    with open(server.workers, "a") as f:
        f.write(RUBY_RECORDER)
    server.start(r)
    try:
        wait_for(lambda: r.llen("t:ruby:ran") == 3, 30, what="Sidekiq to run the jobs")
    finally:
        server.kill()
    # Then it ran each once with its args (it does not track: the task still says enqueued)
    ran = sorted(json.loads(x) for x in r.lrange("t:ruby:ran", 0, -1))
    assert ran == sorted([n, jid] for n, jid in zip(range(3), pushed))
    assert task.progress()["enqueued"] == 3
