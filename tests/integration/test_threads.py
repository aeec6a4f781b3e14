"""Workers of many jobs at once (``threads``), in real daemons on a real Redis: each job is
exactly once, each has its own state (log context, task, slot record), and each is visible as
Sidekiq's tools see a thread (issue 17)."""
import json
import re
import signal

import jobs
import threadjobs
from threadjobs import Held

from harness import counts, title, wait_for
from queued.task import Task

JOBS = ("jobs.py", "threadjobs.py")


def test_two_processes_of_25_threads_run_2000_jobs_exactly_once(daemon, producer, r):
    # Given 2 processes x 25 threads
    d = daemon(concurrency=2, threads=25, require=JOBS)
    # When 2,000 jobs are pushed at once
    jids = jobs.Record.perform_bulk([[i] for i in range(2000)])
    # Then each ran exactly once, each finished once, and nothing is left anywhere
    wait_for(lambda: len(counts(r, jobs.DONE)) == 2000, 60, what="2,000 jobs done")
    assert counts(r, jobs.RUNS) == dict.fromkeys(jids, 1)
    assert counts(r, jobs.DONE) == dict.fromkeys(jids, 1)
    wait_for(lambda: int(r.get("stat:processed") or 0) == 2000, 10, what="the stats")
    assert r.llen("queue:default") == 0 and r.keys("queued:reserved:*") == []
    assert int(r.get("stat:failed") or 0) == 0
    # And the log said its shape
    assert "2 processes x 25 threads = 50 jobs at once" in d.output()
    assert d.stop() == 0


def test_25_jobs_run_at_once_in_one_process_each_with_its_own_state(daemon, producer, r):
    # Given one process of 25 threads
    d = daemon(concurrency=1, threads=25, require=JOBS)
    (worker,) = d.worker_pids()
    # When a task of 25 jobs that each hold their thread is pushed
    task = Task(description="held")
    with task:
        jids = Held.perform_bulk([["t25"]] * 25)
    # Then all 25 run at once in that one process, which says so in its title, as does the
    # master's
    wait_for(lambda: len(counts(r, jobs.RUNS)) == 25, 20, what="25 jobs running")
    wait_for(lambda: "[25 of 25 busy]" in title(worker), 5, what="the worker's title")
    wait_for(lambda: "[25 of 25 busy]" in d.title(), 5, what="the master's title")
    # And Sidekiq's <identity>:workers lists each running job under a thread of its own
    ident = d.identity()
    work = wait_for(lambda: len(r.hgetall(f"{ident}:workers")) == 25
                    and r.hgetall(f"{ident}:workers"), 10, what="25 running in the heartbeat")
    tids = {k.decode() for k in work}
    assert len(tids) == 25 and all(re.fullmatch(r"[0-9a-z]+-\d+", t) for t in tids)
    shown = {json.loads(json.loads(v)["payload"])["jid"] for v in work.values()}
    assert shown == set(jids)
    assert int(r.hget(ident, "busy")) == 25
    # When they are let go
    jobs.open_gate(r, "t25")
    wait_for(lambda: len(counts(r, jobs.DONE)) == 25, 20, what="25 jobs done")
    # Then each ran on a job thread of its own, and each job's say() went to its own record
    # in the task (the task of the job that thread runs, never another's)
    threads = {k.decode(): v.decode() for k, v in r.hgetall(threadjobs.SEEN).items()}
    assert set(threads) == set(jids) and len(set(threads.values())) == 25
    assert all(re.fullmatch(r"queued-job-\d+", t) for t in threads.values())
    found = Task.find(task.id)
    wait_for(lambda: found.progress()["complete"], 10, what="the task complete")
    for record in found.jobs(status="finished"):
        assert [m["text"] for m in record["messages"]] == [f"released {record['jid']}"]
    # And every line a job logged carries its own jid, on its own thread's tid
    out = d.output()
    for jid in jids:
        (line,) = [x for x in out.splitlines() if f"held {jid}" in x]
        assert f" class=Held jid={jid} INFO app.threaded: held {jid}" in line
        assert re.search(rf" tid=w0-\d+ class=Held jid={jid} ", line)
    assert d.stop() == 0


def test_thread_start_fires_once_in_each_thread_that_runs_jobs(daemon, producer, r):
    # Given one process of 3 threads
    d = daemon(concurrency=1, threads=3, require=JOBS)
    (worker,) = d.worker_pids()
    # When sync jobs fill its 3 lanes, twice over, and an async job runs
    for _ in range(2):
        held = Held.perform_bulk([["ts"]] * 3)
        wait_for(lambda: all(j in counts(r, jobs.RUNS) for j in held), 10, what="3 running")
        jobs.open_gate(r, "ts")
        wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in held), 10, what="done")
        r.delete(jobs.GATE + "ts")
    nap = threadjobs.AsyncNap.perform_async(0)
    wait_for(lambda: counts(r, jobs.DONE).get(nap) == 1, 10, what="the async job")
    # Then thread_start fired once in each of the 3 job threads and in the loop's thread
    fired = sorted(x.decode() for x in r.lrange("t:thread_start", 0, -1))
    assert fired == sorted(f"{worker} {n}" for n in (
        "queued-job-1", "queued-job-2", "queued-job-3", "queued-loop"))
    assert d.stop() == 0


def test_ttin_dumps_every_job_threads_stack_and_the_loops_tasks(daemon, producer, r):
    # Given one process of 4 threads running 2 sync jobs and an async one
    d = daemon(concurrency=1, threads=4, require=JOBS)
    held = Held.perform_bulk([["dump"]] * 2)
    nap = threadjobs.AsyncNap.perform_async(2)
    wait_for(lambda: all(j in counts(r, jobs.RUNS) for j in (*held, nap)), 10,
             what="3 jobs running")
    # When the master gets TTIN
    d.signal(signal.SIGTTIN)
    # Then the worker logs each lane's job, each job thread's stack (where its job is) and
    # the event loop's tasks
    out = d.wait_log("Event loop tasks (1):", 10)
    dump = out[out.index("TTIN worker 0 pid="):]
    for jid in (*held, nap):
        assert f"jid={jid}" in dump.splitlines()[0]
    assert dump.count("Thread queued-job-") == 2 and "(sync):" in dump
    assert "in perform" in dump and "threadjobs.py" in dump
    assert "asyncio.sleep(seconds)" in dump  # the async job's own frame, in its task
    jobs.open_gate(r, "dump")
    wait_for(lambda: counts(r, jobs.DONE).get(nap) == 1, 10, what="the async job done")
    assert d.stop() == 0
