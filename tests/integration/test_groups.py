"""Queue groups (Sidekiq 7's capsules) in a real daemon: each group's queues served by worker
processes of its own shape, a job pushed to a group's queue woken for by that group's worker
(issue 17)."""
import jobs
import threadjobs
from threadjobs import Where

from harness import Monitor, counts, wait_for

JOBS = ("jobs.py", "threadjobs.py")
GROUPS = {"cpu": {"queues": ["reports", "exports"], "concurrency": 1, "threads": 1},
          "io": {"queues": ["mailers", "webhooks"], "concurrency": 2, "threads": 10}}
QUEUES = ("reports", "exports", "mailers", "webhooks", "default")


def test_each_group_runs_its_queues_in_processes_of_its_own_shape(daemon, producer, r,
                                                                 redis_url):
    # Given the top-level queue (1 process, 1 thread), a cpu group (1 x 1) of two queues, more
    # than its idle worker can wait on, and an io group (2 x 10); a blocked fetch that would
    # time out only after 60 s
    monitor = Monitor(redis_url)
    try:
        d = daemon(concurrency=1, queues=["default"], groups=GROUPS, fetch_timeout=60,
                   require=JOBS)
        wait_for(lambda: len(d.worker_pids()) == 4, 10, what="4 worker processes")
        waiting = wait_for(lambda: len(monitor.blocked_on()) == 4 and monitor.blocked_on(), 10,
                           what="the 4 workers idle")
    finally:
        monitor.close()
    assert "exports" not in waiting.values()  # (the cpu worker waits on reports)
    out = d.output()
    assert "top level (default): 1 process x 1 thread = 1 job at once" in out
    assert "group cpu (reports, exports): 1 process x 1 thread = 1 job at once" in out
    assert "group io (mailers, webhooks): 2 processes x 10 threads = 20 jobs at once" in out
    assert "22 jobs at once in 4 processes" in out
    # When jobs are pushed to each queue, one at a time, every worker idle in between
    where = {}
    for queue in QUEUES * 3:
        jid = Where.set(queue=queue).perform_async()
        # Then each starts long before a blocked fetch times out: taken by a worker blocked
        # on its queue, or (exports, which no idle worker waits on) by one the master wakes
        wait_for(lambda: counts(r, jobs.DONE).get(jid) == 1, 10, what=f"the job on {queue}")
        where[jid] = (queue, *r.hget(threadjobs.WHERE, jid).decode().split())
    # Then each ran in a process of its queue's group: cpu and top-level jobs in the main
    # thread of a one-job process, io jobs on a job thread, and no process served two groups
    pids = {q: {pid for queue, pid, _ in where.values() if queue == q} for q in QUEUES}
    cpu, io = pids["reports"] | pids["exports"], pids["mailers"] | pids["webhooks"]
    assert len(cpu) == 1 and len(pids["default"]) == 1
    assert not cpu & (io | pids["default"])
    assert not pids["default"] & io
    assert {t for q, _, t in where.values() if q in ("reports", "exports", "default")} \
        == {"MainThread"}
    assert all(t.startswith("queued-job-") for q, _, t in where.values()
               if q in ("mailers", "webhooks"))
    # And the process record says how many jobs at once, and each group's shape
    info = __import__("json").loads(r.hget(d.identity(), "info"))
    assert info["concurrency"] == 22
    assert [(g["name"], g["processes"], g["threads"]) for g in info["groups"]] == [
        ("", 1, 1), ("cpu", 1, 1), ("io", 2, 10)]
    assert d.stop() == 0
