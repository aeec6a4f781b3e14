"""Which job runs next (strict queue order, weighted queues, FIFO within a queue) and how
soon an idle daemon picks a new job up."""
import time

import jobs
from harness import counts, wait_for


def order(r):
    return [t.decode() for t in r.lrange(jobs.ORDER, 0, -1)]


def test_strict_order_drains_queues_in_the_order_listed(daemon, producer, r):
    # Given jobs waiting in three queues, pushed low first so push order cannot explain it
    for queue, tag in (("low", "L"), ("default", "D"), ("critical", "C")):
        for i in range(15):
            jobs.Record.set(queue=queue).perform_async(f"{tag}{i}")
    # When one worker serves them with queues listed by name only (strict order)
    d = daemon(concurrency=1, queues=["critical", "default", "low"])
    # Then every critical job runs before any default job, and every default before any low
    wait_for(lambda: r.llen(jobs.ORDER) == 45, 15, what="45 jobs")
    ran = order(r)
    assert [t[0] for t in ran] == ["C"] * 15 + ["D"] * 15 + ["L"] * 15
    # And FIFO within each queue
    for tag in "CDL":
        assert [t for t in ran if t[0] == tag] == [f"{tag}{i}" for i in range(15)]
    assert d.stop() == 0


def test_a_new_job_in_a_higher_queue_runs_next_in_strict_order(daemon, producer, r):
    # Given one worker busy on a slow low-priority job, with more low jobs waiting
    d = daemon(concurrency=1, queues=["critical", "low"])
    jobs.Sleep.set(queue="low").perform_async(0.5, "L-slow")
    wait_for(lambda: order(r) == ["L-slow"], 5, what="slow job start")
    for i in range(5):
        jobs.Record.set(queue="low").perform_async(f"L{i}")
    # When a critical job arrives
    jobs.Record.set(queue="critical").perform_async("C")
    # Then it is the next to run
    wait_for(lambda: len(order(r)) == 7, 10, what="all jobs")
    assert order(r)[:2] == ["L-slow", "C"]
    assert d.stop() == 0


def test_weighted_queues_are_drawn_in_proportion_to_their_weights(daemon, producer, r):
    # Given 400 jobs waiting in each of two queues weighted 3:1
    jobs.Record.set(queue="a").perform_bulk([["a"]] * 400)
    jobs.Record.set(queue="b").perform_bulk([["b"]] * 400)
    # When one worker serves them (weights given on the command line, Sidekiq's -q a,3)
    d = daemon("-q", "a,3", "-q", "b,1", concurrency=1)
    wait_for(lambda: r.llen(jobs.ORDER) >= 200, 20, what="200 jobs")
    # Then about 3 in 4 of the first 200 came from a (Sidekiq's weighted random draw)
    first = order(r)[:200]
    share = first.count("a") / len(first)
    assert 0.6 <= share <= 0.9, share
    wait_for(lambda: r.llen(jobs.ORDER) == 800, 30, what="all 800 jobs")
    assert d.stop() == 0


def test_fifo_within_a_queue(daemon, producer, r):
    # Given 1..100 pushed one by one, then 101..200 in one bulk push
    for i in range(1, 101):
        jobs.Record.perform_async(i)
    jobs.Record.perform_bulk([[i] for i in range(101, 201)])
    # When one worker serves them (-c 1 on the command line beats the file's concurrency)
    d = daemon("-c", "1")
    assert len(d.worker_pids()) == 1
    # Then they run in the order they were pushed
    wait_for(lambda: r.llen(jobs.ORDER) == 200, 15, what="200 jobs")
    assert order(r) == [str(i) for i in range(1, 201)]
    assert d.stop() == 0


def test_jobs_put_back_by_a_shutdown_keep_their_place(daemon, producer, r):
    # Given one worker going through a queue of quick jobs with a slow one in the middle
    jobs.Record.perform_bulk([[i] for i in range(20)])
    jobs.SlowFirst.perform_async(30, "S")
    jobs.Record.perform_bulk([[i] for i in range(20, 40)])
    d = daemon(concurrency=1, timeout=1)
    wait_for(lambda: "S" in order(r), 10, what="the slow job")
    # When the daemon is stopped while the slow job runs (so it and the jobs reserved after
    # it are put back), and a new daemon takes over
    assert d.stop() == 0
    d2 = daemon(concurrency=1)
    wait_for(lambda: len(order(r)) >= 42 and r.llen("queue:default") == 0, 10, what="all jobs")
    # Then the jobs ran in their original order: the interrupted one again first, and no
    # job that had finished before the stop ran twice
    assert order(r) == [str(i) for i in range(20)] + ["S", "S"] + [str(i) for i in range(20, 40)]
    assert d2.stop() == 0


def test_an_idle_daemon_picks_a_new_job_up_within_milliseconds(daemon, producer, r):
    # Given idle workers blocked on their queues (one per queue)
    d = daemon(concurrency=2, queues=["default", "low"])
    lags = []
    # When jobs are pushed one at a time, to either queue
    for i in range(10):
        queue = ("default", "low")[i % 2]
        t0 = time.time()
        jid = jobs.Stamp.set(queue=queue).perform_async(i)
        started = wait_for(lambda jid=jid: r.hget(jobs.STAMPS, jid), 5, what=f"job {i}")
        lags.append(float(started) - t0)
    # Then each starts within milliseconds, not after a poll interval (p90 < 100 ms)
    lags.sort()
    assert lags[8] < 0.1, lags
    assert d.stop() == 0


def test_idle_workers_cover_the_queues_a_busy_worker_left(daemon, producer, r):
    """BLMOVE waits on one list. Two workers, two queues: one waits on "a", the other on "b".
    When the one on "a" gets a long job, the idle one moves to "a" (after its current wait,
    at most 1 s), so new jobs on "a" start at once instead of at its next poll. Without the
    move, each would start 0-1 s late: five under 0.3 s would be a 1-in-400 chance."""
    import random
    d = daemon(concurrency=2, queues=["a", "b"])
    wait_for(lambda: len(d.worker_pids()) == 2, 10, what="two workers")
    time.sleep(0.3)  # both idle and waiting
    busy = jobs.Sleep.set(queue="a").perform_async(4, "busy")
    wait_for(lambda: order(r) == ["busy"], 5, what="the long job to start")
    time.sleep(1.5)  # the other worker's current wait ends; it moves to "a"
    late = []
    for i in range(5):
        t0 = time.time()
        jid = jobs.Stamp.set(queue="a").perform_async(f"s{i}")
        wait_for(lambda: r.hexists(jobs.STAMPS, jid), 5, what=f"stamp job {i}")
        late.append(float(r.hget(jobs.STAMPS, jid)) - t0)
        time.sleep(random.uniform(0.05, 0.3))
    assert max(late) < 0.3, late
    assert counts(r, jobs.DONE).get(busy) is None  # all while the long job still ran
    assert d.stop() == 0
