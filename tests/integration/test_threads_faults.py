"""Every guarantee per job in a worker of many jobs at once: reliable fetch under kill -9, a
crash's culprit told from its bystanders, time limits in a thread (JobTimeout raised in it, or
the process killed when the job blocks in C, its siblings put back without spending a retry),
TERM and a rolling restart waiting for every job, a task exact, a class that opts out of
threads (issue 17)."""
import json
import os
import re
import signal
import time

import jobs
import threadjobs
from threadjobs import Blocks, Counted, Held, NotThreadSafe, Spin

from ctlrun import ctl
from harness import counts, wait_for, zjobs
from queued.keys import Keys
from queued.task import Task

JOBS = ("jobs.py", "threadjobs.py")


def runs(r):
    return counts(r, jobs.RUNS)


def done(r):
    return counts(r, jobs.DONE)


def in_flight(r, jids) -> bool:
    return all(j in runs(r) for j in jids)


def test_kill_9_of_a_process_with_25_jobs_in_flight_loses_none(daemon, producer, r):
    # Given one process of 25 threads running 25 jobs, and 25 more waiting in the queue
    d = daemon(concurrency=1, threads=25, require=JOBS)
    (worker,) = d.worker_pids()
    running = Held.perform_bulk([["k9"]] * 25)
    wait_for(lambda: in_flight(r, running), 20, what="25 jobs in flight")
    waiting = jobs.Record.perform_bulk([[i] for i in range(25)])
    # When the worker is SIGKILLed
    os.kill(worker, signal.SIGKILL)
    # Then all 25 go back at once (the master names them), nothing is lost, and once their
    # gate opens each ends exactly once; none spent a retry or went to dead
    d.wait_log("25 jobs running: none is known to be the culprit", 10)
    jobs.open_gate(r, "k9")
    wait_for(lambda: len(done(r)) == 50, 30, what="every job done")
    assert {j: runs(r)[j] for j in running} == dict.fromkeys(running, 2)
    assert done(r) == dict.fromkeys(running + waiting, 1)
    assert r.zcard("retry") == 0 and r.zcard("dead") == 0
    assert r.llen("queue:default") == 0
    assert d.stop() == 0


def test_a_crash_with_many_jobs_in_flight_charges_only_its_culprit(daemon, producer, r):
    # Given one process of 25 threads running 10 jobs, and max_crashes 3
    d = daemon(concurrency=1, threads=25, max_crashes=3, require=JOBS)
    bystanders = Held.perform_bulk([["crash"]] * 10)
    wait_for(lambda: in_flight(r, bystanders), 20, what="10 jobs in flight")
    # When a job that kills its worker starts beside them
    culprit = jobs.Crash.perform_async("kill")
    # Then the crash charges nobody: each of the 11 goes back a suspect and runs next alone,
    # where the culprit's crashes are its own: it alone reaches dead, after 3 crashes alone
    d.wait_log("with 11 jobs running: none is known to be the culprit", 10)
    jobs.open_gate(r, "crash")
    (dead,) = wait_for(lambda: zjobs(r, "dead"), 30, what="the culprit in dead")
    assert dead["jid"] == culprit and dead["error_class"] == "WorkerKilled"
    assert "killed its worker 3 times" in dead["error_message"]
    assert runs(r)[culprit] == 4  # once among the 11, then three times alone
    # And every bystander ended once, no retry spent, nothing of it left anywhere
    wait_for(lambda: all(done(r).get(j) == 1 for j in bystanders), 20, what="bystanders done")
    assert {j: runs(r)[j] for j in bystanders} == dict.fromkeys(bystanders, 2)
    assert r.zcard("retry") == 0 and r.llen("queue:default") == 0
    assert d.stop() == 0


def test_a_python_loop_past_its_timeout_gets_jobtimeout_in_its_thread(daemon, producer, r):
    # Given one process of 4 threads, 3 of them running jobs that wait on a gate
    d = daemon(concurrency=1, threads=4, require=JOBS)
    (worker,) = d.worker_pids()
    others = Held.perform_bulk([["loop"]] * 3)
    wait_for(lambda: in_flight(r, others), 20, what="3 jobs in flight")
    # When a job that loops in pure Python runs past its 0.5 s limit
    jid = Spin.perform_async()
    # Then JobTimeout is raised inside it, in its thread: its own except clause saw it, and
    # it failed to retry with that error
    (entry,) = wait_for(lambda: zjobs(r, "retry"), 10, what="its retry")
    assert entry["jid"] == jid and entry["error_class"] == "JobTimeout"
    assert "0.5s timeout" in entry["error_message"]
    assert r.lrange(threadjobs.SPIN, 0, -1) == [jid.encode()]
    # And the process lived on: its other jobs run to their end there
    jobs.open_gate(r, "loop")
    wait_for(lambda: all(done(r).get(j) == 1 for j in others), 10, what="the others done")
    assert d.worker_pids() == [worker] and "killing it" not in d.output()
    assert d.stop() == 0


def test_a_job_blocked_in_c_past_its_timeout_gets_its_process_killed_and_siblings_requeued(
        daemon, producer, r):
    # Given one process of 8 threads, 5 of them running jobs that wait on a gate, and a
    # 3 s grace after a time limit
    d = daemon(concurrency=1, threads=8, timeout_grace=3, require=JOBS)
    (worker,) = d.worker_pids()
    siblings = Held.perform_bulk([["block"]] * 5)
    wait_for(lambda: in_flight(r, siblings), 20, what="5 jobs in flight")
    # When a job blocks in time.sleep (C) far past its 0.3 s limit
    jid = Blocks.perform_async(60)
    # Then it is named before the master acts: in queuedctl processes and in the worker's log
    # (with its thread's stack); then the master kills the process
    shown = wait_for(lambda: [line for line in ctl("processes", url=d.redis_url).stderr
                              .splitlines() if f"Blocks jid={jid} is" in line], 5,
                     what="queuedctl processes naming the job past its limit")
    assert re.search(r"thread \d+: Blocks jid=\w+ is [\d.]+s past its timeout", shown[0])
    d.wait_log(f"jid={jid} is still running", 10)
    assert "time.sleep(seconds)" in d.output()  # (its thread's stack: where it blocks)
    (entry,) = wait_for(lambda: zjobs(r, "retry"), 10, what="the culprit's retry")
    assert entry["jid"] == jid and entry["error_class"] == "JobTimeout"
    assert "did not stop at its JobTimeout; its worker was killed" in entry["error_message"]
    assert entry["retry_count"] == 0
    out = d.output()
    assert "its 5 other running job(s) go back to their queues, no retry spent" in out
    # And its siblings went back as they were (no retry spent, no suspect mark: the culprit
    # is known) and end once each on the new worker
    wait_for(lambda: d.worker_pids() and d.worker_pids() != [worker], 10, what="new worker")
    jobs.open_gate(r, "block")
    wait_for(lambda: all(done(r).get(j) == 1 for j in siblings), 20, what="siblings done")
    assert {j: runs(r)[j] for j in siblings} == dict.fromkeys(siblings, 2)
    assert r.zcard("retry") == 1 and r.zcard("dead") == 0
    assert "none is known to be the culprit" not in d.output()
    assert d.stop() == 0


def test_term_with_25_jobs_in_flight_waits_for_each(daemon, producer, r):
    # Given one process of 25 threads running 25 jobs
    d = daemon(concurrency=1, threads=25, require=JOBS)
    running = Held.perform_bulk([["term"]] * 25)
    wait_for(lambda: in_flight(r, running), 20, what="25 jobs in flight")
    # When the master gets TERM, and the jobs end after it
    d.signal(signal.SIGTERM)
    d.wait_log("shutting down", 5)
    jobs.open_gate(r, "term")
    # Then every job ends there, once, and the daemon exits 0 with nothing left behind
    assert d.wait(30) == 0
    assert done(r) == dict.fromkeys(running, 1)
    assert r.llen("queue:default") == 0 and r.keys("queued:reserved:*") == []


def _term_taken(pid: int) -> bool:
    """SIGTERM sent to ``pid`` has been taken by one of its threads (no longer pending for the
    process): its C handler ran, so the Python one runs before the main thread's next step."""
    with open(f"/proc/{pid}/status") as f:
        pending = dict(line.split(":\t") for line in f.read().splitlines() if ":\t" in line)
    return not int(pending["ShdPnd"], 16) & (1 << (signal.SIGTERM - 1))


def test_a_job_that_lands_after_term_goes_back_at_once_not_when_the_worker_exits(
        daemon, producer, r):
    # Given one process of 2 threads, one running a job held on a gate, the other free, so
    # its blocker waits in BLMOVE (for long: fetch_timeout 30 s)
    d = daemon(concurrency=1, threads=2, fetch_timeout=30, require=JOBS)
    (worker,) = d.worker_pids()
    running = Held.perform_async("landed")
    wait_for(lambda: in_flight(r, [running]), 20, what="the held job running")
    wait_for(lambda: d.blocked_workers(), 10, what="the blocker waiting in Redis")
    # When the master gets TERM (its beat says quiet once it has sent the workers theirs, and
    # the worker has taken it), and a job is pushed while the blocker still waits
    d.signal(signal.SIGTERM)
    wait_for(lambda: r.hget(d.identity(), "quiet") == b"true", 10, what="the master stopping")
    wait_for(lambda: _term_taken(worker), 10, what="the worker's TERM taken")
    late = jobs.Record.perform_async("late")
    # Then that job, landed by the blocker, is back at the head of its queue while the held
    # job still runs (it does not wait there for the worker's exit)
    wait_for(lambda: [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)] == [late]
             and r.keys(Keys().landing("*", "*", "*")) == [], 10, interval=0.01,
             what="the landed job back in its queue")
    assert running not in done(r)
    # And once the held job ends the daemon exits 0, the late job unrun and still queued
    jobs.open_gate(r, "landed")
    assert d.wait(30) == 0
    assert done(r) == {running: 1} and late not in runs(r)
    assert [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)] == [late]


def test_term_past_its_deadline_puts_every_running_job_back(daemon, producer, r):
    # Given one process of 25 threads running 25 jobs, and a 1 s shutdown timeout
    d = daemon(concurrency=1, threads=25, shutdown_timeout=1, require=JOBS)
    running = Held.perform_bulk([["late"]] * 25)
    wait_for(lambda: in_flight(r, running), 20, what="25 jobs in flight")
    # When TERM comes and the jobs outlive the deadline
    d.signal(signal.SIGTERM)
    assert d.wait(30) == 0
    # Then all 25 are back at the head of their queue, as they were: no retry, no suspect
    back = [json.loads(p) for p in r.lrange("queue:default", 0, -1)]
    assert sorted(j["jid"] for j in back) == sorted(running)
    assert not any("queued_suspect" in j or "retry_count" in j for j in back)
    assert r.keys("queued:reserved:*") == []


def test_a_rolling_restart_with_threads_runs_each_job_once(daemon, producer, r):
    # Given two processes of 10 threads with jobs running and more coming
    d = daemon(concurrency=2, threads=10, require=JOBS)
    first = d.worker_pids()
    running = Held.perform_bulk([["hup"]] * 12)
    wait_for(lambda: in_flight(r, running), 20, what="12 jobs in flight")
    # When HUP replaces every worker (each leaves after its jobs) while jobs keep coming, the
    # held jobs ending only once the first worker is being replaced
    d.signal(signal.SIGHUP)
    more = jobs.Record.perform_bulk([[i] for i in range(300)])
    d.wait_log("is being replaced", 30)
    assert not set(done(r)) & set(running)
    jobs.open_gate(r, "hup")
    # Then every job ran exactly once, and no worker of before is left
    wait_for(lambda: len(done(r)) == 312, 30, what="every job done")
    assert runs(r) == dict.fromkeys(running + more, 1)
    wait_for(lambda: len(d.worker_pids()) == 2 and not set(d.worker_pids()) & set(first), 20,
             what="both workers replaced")
    assert d.stop() == 0


def test_a_task_of_1000_jobs_over_threads_is_exact(daemon, producer, r):
    # Given two processes of 25 threads
    d = daemon(concurrency=2, threads=25, require=JOBS)
    # When a task of 1,000 jobs runs there
    task = Task(description="threads")
    with task:
        jids = jobs.Record.perform_bulk([[i] for i in range(1000)])
    found = Task.find(task.id)
    wait_for(lambda: found.progress()["complete"], 60, what="the task complete")
    # Then its counts are exact and each job ran once
    progress = found.progress()
    assert (progress["total"], progress["finished"], progress["failed"], progress["error"]) \
        == (1000, 1000, 0, 0)
    assert runs(r) == dict.fromkeys(jids, 1)
    assert d.stop() == 0


def test_a_class_that_is_not_thread_safe_runs_alone_in_the_main_thread(daemon, producer, r):
    # Given one process of 8 threads, busy with jobs that count how many run at once
    d = daemon(concurrency=1, threads=8, require=JOBS)
    busy = Counted.perform_bulk([[0.3]] * 16)
    # When jobs of a class with queued_options {"threads": False} come between them
    alone = NotThreadSafe.perform_bulk([[0.2]] * 3)
    more = Counted.perform_bulk([[0.3]] * 16)
    wait_for(lambda: len(done(r)) == 35, 30, what="every job done")
    # Then each of those ran in the main thread with nothing else running from its start to
    # its end (a Counted job lasts longer than it), and the others ran many at once
    seen = {k.decode(): v.decode() for k, v in r.hgetall(threadjobs.SEEN).items()}
    assert {seen[j] for j in alone} == {"MainThread|0|0"}
    assert int(r.get("t:most")) > 1
    assert runs(r) == dict.fromkeys(busy + alone + more, 1)
    assert d.stop() == 0


def test_max_jobs_recycles_a_threaded_worker_after_its_jobs_each_once(daemon, producer, r):
    # Given processes of 5 threads that leave after 20 jobs
    d = daemon(concurrency=1, threads=5, max_jobs=20, require=JOBS)
    first = d.worker_pids()
    # When 100 jobs run
    jids = jobs.Record.perform_bulk([[i] for i in range(100)])
    wait_for(lambda: len(done(r)) == 100, 30, what="100 jobs done")
    # Then each ran once, and the worker was replaced (each after its jobs, nothing lost)
    assert runs(r) == dict.fromkeys(jids, 1)
    assert "recycling worker 0: ran" in d.output()
    wait_for(lambda: d.worker_pids() and set(d.worker_pids()) != set(first), 10,
             what="a fresh worker")
    assert r.llen("queue:default") == 0 and r.zcard("retry") == 0
    assert d.stop() == 0


def test_job_operations_from_threads_and_async_jobs(daemon, producer, r):
    # Given one process of 4 threads
    d = daemon(concurrency=1, threads=4, require=JOBS)
    # When jobs release themselves, bury themselves and touch their lease, from job threads
    # and as async jobs on the process's loop
    released = [jobs.Releases.perform_async(0, 1), threadjobs.AsyncReleases.perform_async(0, 1)]
    buried = [jobs.Buries.perform_async("not today"),
              threadjobs.AsyncBuries.perform_async("not today")]
    touched = [jobs.Touches.perform_async(0.3, 0.1),
               threadjobs.AsyncTouches.perform_async(0.3, 0.1)]
    wait_for(lambda: all(done(r).get(j) == 1 for j in released + touched), 10, what="done")
    wait_for(lambda: len(zjobs(r, "dead")) == 2, 10, what="the buried jobs")
    # Then each did what it says, as in a worker of one job at a time
    assert [runs(r)[j] for j in released] == [2, 2]
    dead = {e["jid"]: e for e in zjobs(r, "dead")}
    assert set(dead) == set(buried)
    assert all(e["error_class"] == "Buried" and e["bury_count"] == 1 for e in dead.values())
    assert not set(buried) & set(done(r))
    for key in ("t:touched", "t:touched:async"):
        touches = r.lrange(key, 0, -1)
        assert set(touches) == {b"1"} and len(touches) >= 2, key
    assert r.llen("t:caught") == 0
    assert r.zcard("retry") == 0 and r.llen("queue:default") == 0
    assert d.stop() == 0


def test_a_timeout_kill_charges_its_culprit_not_another_job_of_its_jid(daemon, producer, r):
    # Given one process of 4 threads running two jobs of one jid (users fix jids to make jobs
    # idempotent): an innocent one waiting on a gate, reserved first, and one that blocks in
    # C past its 0.3 s limit (rt2 finding 5: the first of the jid was charged, the culprit
    # went back "no retry spent")
    d = daemon(concurrency=1, threads=4, timeout_grace=1, require=JOBS)
    (worker,) = d.worker_pids()
    jid = "5a" * 12
    for cls, args in (("Held", ["samejid"]), ("Blocks", [60])):
        r.lpush("queue:default", json.dumps({
            "class": cls, "args": args, "queue": "default", "jid": jid, "retry": 2,
            "created_at": time.time(), "enqueued_at": time.time()}))
    # When the master kills the process at the culprit's limit + grace
    (entry,) = wait_for(lambda: zjobs(r, "retry"), 20, what="a job charged")
    # Then the culprit alone is charged; the innocent went back and runs again, to its end
    assert entry["class"] == "Blocks" and entry["error_class"] == "JobTimeout"
    wait_for(lambda: d.worker_pids() and d.worker_pids() != [worker], 10, what="new worker")
    wait_for(lambda: runs(r).get(jid) == 3, 10, what="the innocent running again")
    jobs.open_gate(r, "samejid")
    wait_for(lambda: done(r).get(jid) == 1, 10, what="the innocent done")
    assert [e["class"] for e in zjobs(r, "retry")] == ["Blocks"] and r.zcard("dead") == 0
    assert d.stop() == 0


def suspect(producer, klass: str, *args) -> bytes:
    """A job marked a suspect of a crash of many jobs (recovery.py): it runs alone."""
    return json.dumps(producer.normalize({"class": klass, "args": list(args),
                                          "queued_suspect": 1})).encode()


def test_a_process_takes_one_job_to_run_alone_at_a_time_the_rest_stay_queued(
        daemon, producer, r):
    # Given two processes of 4 lanes each
    d = daemon(concurrency=2, threads=4, require=JOBS)
    # When 6 suspects (each held until its gate opens) are pushed at once
    pushed = [suspect(producer, "Gate", "suspects") for _ in range(6)]
    r.lpush("queue:default", *pushed)
    # Then each process runs one, alone, and the other 4 wait in the queue where any process
    # may take them (rt2 finding 3: one took 25 in one fetch and ran them one by one while
    # the other sat idle and the queue showed 0)
    wait_for(lambda: len(runs(r)) == 2 and r.llen("queue:default") == 4, 10,
             what="2 running, 4 still queued")
    # (each process's reserved jobs: the one it runs, no other)
    held = [[json.loads(m.split(b"\0", 2)[2])["jid"]
             for m in r.zrange(Keys().reserved(d.identity(), slot), 0, -1)] for slot in (0, 1)]
    assert [len(jids) for jids in held] == [1, 1] and {*held[0], *held[1]} == set(runs(r))
    # And once the gate opens each runs once
    jobs.open_gate(r, "suspects")
    jids = [json.loads(p)["jid"] for p in pushed]
    wait_for(lambda: done(r) == dict.fromkeys(jids, 1), 20, what="the 6 done")
    assert runs(r) == dict.fromkeys(jids, 1)
    assert d.stop() == 0


def test_a_job_waiting_to_run_alone_does_not_hold_up_fresh_jobs(daemon, producer, r):
    # Given one process of 4 lanes running a long job
    d = daemon(concurrency=1, threads=4, require=JOBS)
    long = jobs.Gate.perform_async("long")
    wait_for(lambda: long in runs(r), 10, what="the long job running")
    # When a suspect and 3 quick jobs are pushed
    alone = suspect(producer, "Gate", "alone")
    quick = [json.dumps(producer.normalize({"class": "Record", "args": ["q"]})).encode()
             for _ in range(3)]
    r.lpush("queue:default", alone, *quick)
    # Then the quick jobs run on the free lanes meanwhile (rt2 finding 3: nothing started
    # until the long job ended), and the suspect waits for the lanes to be free
    quick_jids = [json.loads(q)["jid"] for q in quick]
    wait_for(lambda: all(done(r).get(j) == 1 for j in quick_jids), 10, what="the quick jobs")
    alone_jid = json.loads(alone)["jid"]
    assert alone_jid not in runs(r)
    # And once the long job ends, the suspect runs
    jobs.open_gate(r, "long")
    wait_for(lambda: alone_jid in runs(r), 10, what="the suspect running")
    jobs.open_gate(r, "alone")
    wait_for(lambda: done(r).get(alone_jid) == 1 and done(r).get(long) == 1, 10,
             what="all done")
    assert d.stop() == 0
