"""The done line of a job whose ack has gone out is written (RT9's promise, RT12's findings):
whatever carries the ack out (a unique job's guard on the worker's connection, a lane's ack
sent while its job's hook runs), the line goes first; and a handler the application adds as a
worker starts gets the done lines."""
import json
import os
import signal
import time

import jobs
import pytest
from ackjobs import reserved_jids

from harness import wait_for

REQUIRE = ("jobs.py", "ackjobs.py")


def done_jids(out: str) -> list[str]:
    return [x.split(" jid=")[1].split()[0] for x in out.splitlines()
            if " elapsed=" in x and x.endswith("INFO queued.worker: done")]


def step(i, **more) -> str:
    return json.dumps({"class": "Step", "args": [i, *more.pop("args", [])], "queue": "default",
                       "jid": f"{i:024x}", "retry": 0, "created_at": time.time(),
                       "enqueued_at": time.time(), **more})


def test_jobs_acked_by_a_unique_jobs_guard_have_their_lines_before_a_kill(daemon, producer, r):
    # Given a worker of one job at a time that knows Step as a short class, then a batch of
    # 300 no-op jobs and a unique Step that waits at a gate (its guard's call carries the acks of
    # the 300 out, with no batch end or flush of its own before it)
    d = daemon(concurrency=1, prefetch=500, require=REQUIRE)
    for i in range(3):
        producer.push_raw("default", step(1000 + i))
    wait_for(lambda: r.hlen(jobs.RUNS) == 3, 10, what="the warm-up Steps")
    payloads = [json.dumps({"class": "Record", "args": [i], "queue": "default",
                            "jid": f"{i:024x}", "retry": 0}) for i in range(300)]
    payloads.append(step(2000, args=["g"], unique_for=600))
    r.lpush("queue:default", *payloads)
    # When only the gated job is left reserved (the 300 acked), the worker is killed -9
    wait_for(lambda: reserved_jids(r) == [f"{2000:024x}"] and r.llen("queue:default") == 0,
             20, what="the 300 acked, the gated job running")
    (worker,) = d.worker_pids()
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: worker not in d.worker_pids(), 10, what="the worker gone")
    # Then each of the 300 has its done line (they never run again)
    assert sorted(set(done_jids(d.output())) - {f"{1000 + i:024x}" for i in range(3)}) == \
        sorted(f"{i:024x}" for i in range(300))
    jobs.open_gate(r, "g")
    d.cleanup()


@pytest.mark.parametrize("job", ["HookAtGate", "AsyncHookAtGate"])
def test_a_lanes_ack_sent_while_its_hook_runs_follows_its_done_line(daemon, producer, r, job):
    # Given a worker of 2 jobs at once and a job (sync, or async: run_async) whose
    # after_succeeded hook waits at a gate
    d = daemon(concurrency=1, threads=2, require=REQUIRE)
    import ackjobs
    jid = getattr(ackjobs, job).perform_async("hook")
    # When its ack has gone out while the hook still runs
    wait_for(lambda: r.hget(jobs.RUNS, jid) == b"1" and reserved_jids(r) == [], 10,
             what="the job acked, its hook waiting")
    # Then its done line is already written
    assert done_jids(d.output()) == [jid]
    jobs.open_gate(r, "hook")
    assert d.stop() == 0


def test_a_handler_added_as_a_worker_starts_gets_the_done_lines(daemon, producer, r, tmp_path):
    records = tmp_path / "records.txt"
    d = daemon(concurrency=1, require=("handlerjobs.py",),
               env={"QUEUED_TEST_RECORDS": str(records)})
    ids = [jobs.Record.perform_async(i) for i in range(3)]
    wait_for(lambda: r.hlen(jobs.DONE) == 3, 10, what="the jobs")
    assert d.stop() == 0
    assert records.read_text().splitlines().count("queued.worker done") == 3
    assert sorted(done_jids(d.output())) == sorted(ids)


def test_a_thread_of_the_applications_own_logging_loses_and_doubles_no_done_line(
        daemon, producer, r):
    # Given a worker of one job at a time (its lines made without a lock) whose application
    # logs from a thread of its own all the time (its records write the held lines first)
    d = daemon(concurrency=1, prefetch=500, require=("bgthreadjobs.py",))
    n = 30_000
    r.lpush("queue:default", *[json.dumps({"class": "Noop", "args": [], "queue": "default",
                                           "jid": f"{i:024x}", "retry": 0})
                               for i in range(n)])
    wait_for(lambda: r.llen("queue:default") == 0 and reserved_jids(r) == [], 120,
             what="the jobs run")
    assert d.stop() == 0
    # Then each job has exactly one done line (the daemon's stop wrote the last ones)
    done = done_jids(d.output())
    assert len(done) == n and set(done) == {f"{i:024x}" for i in range(n)}
