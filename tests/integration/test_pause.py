"""A paused queue (its name in the ``paused`` set, where Sidekiq Pro keeps it) is skipped by
every worker of every master within one fetch round; its jobs stay put; unpaused, they run."""
import re
import time

import jobs

from harness import counts, wait_for


def settled_after(d, line: str, workers: int) -> None:
    """Wait until the master logged ``line`` and then every one of its ``workers`` went back
    to waiting (-v: "idle: waiting on ..."): the pause change has taken effect."""
    def after():
        out = d.output()
        if line not in out:
            return False
        rest = out[out.index(line):]
        return len(set(re.findall(r" tid=(w\d+) .*idle: waiting on", rest))) == workers
    wait_for(after, 10, what=f"{line!r} and every worker waiting again")


def test_a_paused_queue_is_skipped_by_every_master_and_its_jobs_wait(daemon, producer, r):
    # Given two daemons serving queues a and b, every worker idle (blocked, some on a)
    d1 = daemon(concurrency=2, queues=["a", "b"], verbose=True)
    d2 = daemon(concurrency=1, queues=["a", "b"], verbose=True)
    # When a is paused (and both masters have seen it), and jobs are pushed to both queues
    r.sadd("paused", "a")
    settled_after(d1, "paused queues now: a", 2)
    settled_after(d2, "paused queues now: a", 1)
    held_back = [jobs.Record.set(queue="a").perform_async(i) for i in range(5)]
    ran = [jobs.Record.set(queue="b").perform_async(i) for i in range(5)]
    # Then b's jobs run; a's stay in their queue, untouched, even by a worker that was
    # blocked on a when the pause came
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in ran), 10, what="b's jobs")
    time.sleep(0.5)  # a few fetch rounds more: nothing may take a's jobs meanwhile
    assert r.llen("queue:a") == 5
    assert not any(j in counts(r, jobs.RUNS) for j in held_back)
    # When a is unpaused
    r.srem("paused", "a")
    # Then its jobs run at once (the masters wake their idle workers on the change)
    t0 = time.monotonic()
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in held_back), 5,
             what="a's jobs after the unpause")
    assert time.monotonic() - t0 < 1.0  # well under fetch_timeout (2 s): woken, not timed out
    assert d1.stop() == 0 and d2.stop() == 0


def test_a_worker_whose_every_queue_is_paused_waits_and_resumes(daemon, producer, r):
    d = daemon(concurrency=1, queues=["only"], fetch_timeout=10, verbose=True)
    d.wait_log("jobs:", 10)
    r.sadd("paused", "only")
    settled_after(d, "paused queues now: only", 1)
    jid = jobs.Record.set(queue="only").perform_async("waits")
    time.sleep(0.5)  # several would-be fetch rounds: nothing runs while paused
    assert jid not in counts(r, jobs.RUNS) and r.llen("queue:only") == 1
    r.srem("paused", "only")
    wait_for(lambda: counts(r, jobs.DONE).get(jid) == 1, 3, what="the job after the unpause")
    assert d.stop() == 0
