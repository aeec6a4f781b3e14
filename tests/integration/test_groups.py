"""Queue groups (Sidekiq 7's capsules) in a real daemon: each group's queues served by worker
processes of its own shape, a job pushed to a group's queue woken for by that group's worker
(issue 17)."""
import jobs
import threadjobs
from threadjobs import Where

from harness import counts, wait_for

JOBS = ("jobs.py", "threadjobs.py")
GROUPS = {"cpu": {"queues": ["reports"], "concurrency": 1, "threads": 1},
          "io": {"queues": ["mailers", "webhooks"], "concurrency": 2, "threads": 10}}


def test_each_group_runs_its_queues_in_processes_of_its_own_shape(daemon, producer, r):
    # Given the top-level queue (1 process, 1 thread), a cpu group (1 x 1) and an io group
    # (2 x 10)
    d = daemon(concurrency=1, queues=["default"], groups=GROUPS, require=JOBS)
    wait_for(lambda: len(d.worker_pids()) == 4, 10, what="4 worker processes")
    out = d.output()
    assert "top level (default): 1 process x 1 thread = 1 job at once" in out
    assert "group cpu (reports): 1 process x 1 thread = 1 job at once" in out
    assert "group io (mailers, webhooks): 2 processes x 10 threads = 20 jobs at once" in out
    assert "22 jobs at once in 4 processes" in out
    # When jobs are pushed to each queue, one at a time, every worker idle in between (so
    # each is woken for by the master or taken by a worker blocked on its queue)
    where = {}
    for queue in ("reports", "mailers", "webhooks", "default") * 3:
        jid = Where.set(queue=queue).perform_async()
        wait_for(lambda: counts(r, jobs.DONE).get(jid) == 1, 10, what=f"the job on {queue}")
        where[jid] = (queue, *r.hget(threadjobs.WHERE, jid).decode().split())
    # Then each ran in a process of its queue's group: cpu and top-level jobs in the main
    # thread of a one-job process, io jobs on a job thread, and no process served two groups
    pids = {q: {pid for queue, pid, _ in where.values() if queue == q}
            for q in ("reports", "mailers", "webhooks", "default")}
    assert len(pids["reports"]) == 1 and len(pids["default"]) == 1
    assert not pids["reports"] & (pids["mailers"] | pids["webhooks"] | pids["default"])
    assert not pids["default"] & (pids["mailers"] | pids["webhooks"])
    assert {t for q, _, t in where.values() if q in ("reports", "default")} == {"MainThread"}
    assert all(t.startswith("queued-job-") for q, _, t in where.values()
               if q in ("mailers", "webhooks"))
    # And the process record says how many jobs at once, and each group's shape
    info = __import__("json").loads(r.hget(d.identity(), "info"))
    assert info["concurrency"] == 22
    assert [(g["name"], g["processes"], g["threads"]) for g in info["groups"]] == [
        ("", 1, 1), ("cpu", 1, 1), ("io", 2, 10)]
    assert d.stop() == 0
