"""An idle daemon starts a job on any of its queues at once, however many queues it serves and
however few idle workers it has (waker.py): not when an idle worker's block times out."""
import random
import statistics

import jobs
import pytest

from harness import wait_for

QUEUES = [f"q{i}" for i in range(10)]
#: So long that a job found only when a block times out (the workers block on 2 of the 10
#: queues) would wait minutes: the test's 30 s wait for each job fails for it.
FETCH_TIMEOUT = 600


def pickups(r) -> list[tuple[str, float]]:
    return [(q, float(s)) for q, s in (x.decode().split(":") for x in r.lrange(jobs.PICKUP, 0, -1))]


@pytest.mark.parametrize("weighted", [False, True], ids=["strict", "weighted"])
def test_every_queue_is_picked_up_at_once_with_more_queues_than_workers(
        daemon, producer, r, weighted):
    # Given 10 queues and 2 workers, both blocked (each on one queue), with a fetch_timeout
    # so long that a job found only by a block timing out would wait minutes
    queues = [[q, 1] for q in QUEUES] if weighted else QUEUES
    d = daemon(concurrency=2, queues=queues, fetch_timeout=FETCH_TIMEOUT)
    d.wait_idle()
    # When 50 jobs are pushed one at a time, spread over the queues, while the daemon idles
    rng = random.Random(7)
    targets = [QUEUES[i % 10] for i in range(50)]
    rng.shuffle(targets)
    for i, queue in enumerate(targets):
        jobs.Pickup.set(queue=queue).perform_async()
        # Then each one starts, on whatever queue it is: within the test's life no block
        # times out, so a job starts only if a worker's BLMOVE took it or the master woke one
        wait_for(lambda: r.llen(jobs.PICKUP) == i + 1, 30, interval=0.002,
                 what=f"job {i} on {queue} to start (a worker woken for it)")
    got = pickups(r)
    assert sorted(q for q, _ in got) == sorted(targets)
    # (how soon is for scripts/bench to measure on a quiet machine; printed with -s)
    late = sorted(s for _, s in got)
    print(f"\npickup after push: median {statistics.median(late) * 1000:.1f} ms, "
          f"max {late[-1] * 1000:.1f} ms")
    assert d.stop() == 0
