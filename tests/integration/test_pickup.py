"""An idle daemon starts a job on any of its queues at once, however many queues it serves and
however few idle workers it has (waker.py): not when an idle worker's block times out."""
import random
import time

import jobs
import pytest

from harness import wait_for

QUEUES = [f"q{i}" for i in range(10)]


def pickups(r) -> list[tuple[str, float]]:
    return [(q, float(s)) for q, s in (x.decode().split(":") for x in r.lrange(jobs.PICKUP, 0, -1))]


@pytest.mark.parametrize("weighted", [False, True], ids=["strict", "weighted"])
def test_every_queue_is_picked_up_at_once_with_more_queues_than_workers(
        daemon, producer, r, weighted):
    # Given 10 queues and 2 workers, and a fetch_timeout long enough that a job found only by
    # a block timing out would wait seconds
    queues = [[q, 1] for q in QUEUES] if weighted else QUEUES
    d = daemon(concurrency=2, queues=queues, fetch_timeout=10)
    d.wait_log("jobs:", 10)
    wait_for(lambda: len(d.worker_pids()) == 2, 10, what="both workers")
    time.sleep(0.5)  # both workers reach their first block (2 of the 10 queues watched)
    # When 50 jobs are pushed one at a time, spread over the queues, while the daemon idles
    rng = random.Random(7)
    targets = [QUEUES[i % 10] for i in range(50)]
    rng.shuffle(targets)
    for i, queue in enumerate(targets):
        jobs.Pickup.set(queue=queue).perform_async()
        wait_for(lambda: r.llen(jobs.PICKUP) == i + 1, 5, interval=0.002,
                 what=f"job {i} on {queue} to start")
    # Then every one started well under fetch_timeout, on whatever queue it was (a bound
    # about the behaviour, not the speed: a job found only when a block times out waits up
    # to fetch_timeout, and before the master woke workers, up to 1 s; scripts/bench measures)
    got = pickups(r)
    assert sorted(q for q, _ in got) == sorted(targets)
    slowest = max(s for _, s in got)
    assert slowest < 0.5, sorted(got, key=lambda x: -x[1])[:5]
    assert d.stop() == 0
