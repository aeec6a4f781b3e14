"""A paused queue (its name in the ``paused`` set, where Sidekiq Pro keeps it) is skipped by
every worker of every master within one fetch round; its jobs stay put; unpaused, they run."""
import re

import jobs

from harness import counts, wait_for

#: So long that no idle worker's block times out during a test: a worker looks at the queues
#: again only when a job lands on its queue or its master wakes it (a change of pauses does).
FETCH_TIMEOUT = 600


def change(masters: dict, do, line: str) -> None:
    """Do ``do()`` (a change of the paused set), then wait until each master logged ``line``
    and then every one of its workers went back to waiting (-v: "idle: waiting on ...") and
    is blocked again: each worker has been through a fetch round since the change."""
    since = {d: len(d.output()) for d in masters}
    do()
    for d, workers in masters.items():
        def after(d=d, workers=workers):
            out = d.output()[since[d]:]
            if line + "\n" not in out:
                return False
            rest = out[out.index(line + "\n"):]
            return len(set(re.findall(r" tid=(w\d+) .*idle: waiting on", rest))) == workers
        wait_for(after, 20, what=f"{line!r} and every worker waiting again")
        d.wait_idle()


def test_a_paused_queue_is_skipped_by_every_master_and_its_jobs_wait(daemon, producer, r):
    # Given two daemons serving queues a and b, every worker idle (blocked, some on a)
    d1 = daemon(concurrency=2, queues=["a", "b"], verbose=True, fetch_timeout=FETCH_TIMEOUT)
    d2 = daemon(concurrency=1, queues=["a", "b"], verbose=True, fetch_timeout=FETCH_TIMEOUT)
    masters = {d1: 2, d2: 1}
    d1.wait_idle()
    d2.wait_idle()
    # When a is paused (and both masters have seen it), and jobs are pushed to both queues
    change(masters, lambda: r.sadd("paused", "a"), "paused queues now: a")
    held_back = [jobs.Record.set(queue="a").perform_async(i) for i in range(5)]
    ran = [jobs.Record.set(queue="b").perform_async(i) for i in range(5)]
    # Then b's jobs run
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in ran), 20, what="b's jobs")
    # and a's stay in their queue, untouched, through a fetch round of every worker with
    # them there (pausing b as well wakes every worker, whose fetch looks at both queues; so
    # does unpausing b), and with every worker waiting again: none waits on a (its BLMOVE
    # would have taken a job at once), even one that was blocked on a when the pause came
    change(masters, lambda: r.sadd("paused", "b"), "paused queues now: a, b")
    change(masters, lambda: r.srem("paused", "b"), "paused queues now: a")
    assert r.llen("queue:a") == 5
    assert not any(j in counts(r, jobs.RUNS) for j in held_back)
    # When a is unpaused
    r.srem("paused", "a")
    # Then its jobs run at once: the masters wake their idle workers on the change (no block
    # times out within this wait)
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in held_back), 30,
             what="a's jobs after the unpause")
    assert d1.stop() == 0 and d2.stop() == 0


def test_a_worker_whose_every_queue_is_paused_waits_and_resumes(daemon, producer, r):
    # Given a worker whose one queue is paused, waiting (on no queue) a second at a time
    d = daemon(concurrency=1, queues=["only"], fetch_timeout=1, verbose=True)
    change({d: 1}, lambda: r.sadd("paused", "only"), "paused queues now: only")
    # When a job is pushed there
    since = len(d.output())
    jid = jobs.Record.set(queue="only").perform_async("waits")
    # Then through two fetch rounds after the push (each ends in "idle: waiting on no
    # queue": the second one's fetch began after the push) nothing runs
    wait_for(lambda: d.output()[since:].count("idle: waiting on no queue (paused)") >= 2, 20,
             what="two fetch rounds after the push")
    assert jid not in counts(r, jobs.RUNS) and r.llen("queue:only") == 1
    # When the queue is unpaused, the job runs
    r.srem("paused", "only")
    wait_for(lambda: counts(r, jobs.DONE).get(jid) == 1, 20, what="the job after the unpause")
    assert d.stop() == 0
