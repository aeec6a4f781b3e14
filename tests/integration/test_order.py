"""Which job runs next (strict queue order, weighted queues, FIFO within a queue), and how an
idle daemon picks a new job up: from its blocking fetch, not at a later poll. (How soon, in
milliseconds, is measured by scripts/bench, not asserted here.)"""
import jobs
from harness import Monitor, counts, wait_for, worker_connections


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
    jobs.Gate.set(queue="low").perform_async("L-slow")
    wait_for(lambda: order(r) == ["L-slow"], what="slow job start")
    for i in range(5):
        jobs.Record.set(queue="low").perform_async(f"L{i}")
    # When a critical job arrives while it still runs
    jobs.Record.set(queue="critical").perform_async("C")
    assert order(r) == ["L-slow"]
    jobs.open_gate(r, "L-slow")
    # Then it is the next to run
    wait_for(lambda: len(order(r)) == 7, what="all jobs")
    assert order(r) == ["L-slow", "C"] + [f"L{i}" for i in range(5)]
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


def test_an_idle_daemon_starts_a_new_job_from_its_blocking_fetch(daemon, producer, r):
    # Given idle workers blocked on the queue for up to 30 s each (fetch_timeout), so a job
    # pushed now can start within the test's 10 s only if a blocking fetch hands it over
    d = daemon(concurrency=2, fetch_timeout=30)
    for i in range(5):
        wait_for(lambda: len(worker_connections(r, blocked=True)) == 2,
                 what="both workers blocked")
        # When a job is pushed
        jid = jobs.Record.perform_async(i)
        # Then it runs, long before the fetch would have timed out and polled
        wait_for(lambda jid=jid: counts(r, jobs.DONE).get(jid) == 1, what=f"job {i}")
    assert d.stop() == 0


def test_idle_workers_cover_the_queues_a_busy_worker_left(daemon, producer, r, redis_url):
    """BLMOVE waits on one list. Two workers, two queues: one waits on "a", the other on "b".
    When the one on "a" gets a long job, the idle one moves to "a" (after its current wait,
    at most 1 s), so new jobs on "a" are handed over by its blocking fetch instead of
    waiting for its next poll. MONITOR shows which list each blocked worker waits on."""
    monitor = Monitor(redis_url)
    try:
        d = daemon(concurrency=2, queues=["a", "b"])
        # Given both workers idle, one waiting on each queue
        wait_for(lambda: sorted(monitor.blocked_on().values()) == ["a", "b"],
                 what="one idle worker on each queue")
        # When the one waiting on "a" gets a long job
        busy = jobs.Gate.set(queue="a").perform_async("busy")
        wait_for(lambda: order(r) == ["busy"], what="the long job to start")
        # Then the idle one moves to "a", and jobs pushed to "a" run while the long one runs
        for i in range(3):
            wait_for(lambda: list(monitor.blocked_on().values()) == ["a"],
                     what='the idle worker waiting on "a"')
            jid = jobs.Record.set(queue="a").perform_async(f"s{i}")
            wait_for(lambda jid=jid: counts(r, jobs.DONE).get(jid) == 1, what=f"job s{i}")
        assert counts(r, jobs.DONE).get(busy) is None  # all while the long job still ran
        jobs.open_gate(r, "busy")
        wait_for(lambda: counts(r, jobs.DONE).get(busy) == 1, what="the long job to end")
        assert d.stop() == 0
    finally:
        monitor.close()
