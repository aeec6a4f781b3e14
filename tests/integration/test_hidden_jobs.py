"""No job waits behind another while a worker that could run it is idle (issue 16: a worker held
seven quick jobs for 12 s behind a sleep(12) while two workers sat idle), and what a worker
holds is visible."""
import json

import jobs
import pytest

from harness import counts, wait_for


def payload(producer, klass, *args) -> bytes:
    return json.dumps(producer.normalize({"class": klass, "args": list(args)})).encode()


@pytest.mark.parametrize("shape", [{"concurrency": 3}, {"concurrency": 1, "threads": 3}],
                         ids=["processes", "threads"])
def test_jobs_reserved_behind_a_slow_one_go_to_an_idle_worker(daemon, producer, r, shape):
    # Given three workers (or lanes) of one job at a time, two of them busy (each on a job held
    # until its gate opens), the third idle
    d = daemon(**shape)
    busy = [jobs.Gate.perform_async("others") for _ in range(2)]
    wait_for(lambda: all(j in counts(r, jobs.RUNS) for j in busy), 10, what="two busy")
    # When 31 quick jobs (enough for the idle worker's batches to grow to 8: 1+2+4+8+8+8),
    # then a slow one, then 7 quick ones are pushed in one command (so the worker reserves the
    # slow one and the 7 after it in one batch)
    slow = payload(producer, "Gate", "slow")
    quick = [payload(producer, "Record", "after") for _ in range(7)]
    fill = [payload(producer, "Record", "fill") for _ in range(31)]
    r.lpush("queue:default", *fill, slow, *quick)
    slow_jid = json.loads(slow)["jid"]
    wait_for(lambda: slow_jid in counts(r, jobs.RUNS), 10, what="the slow job running")
    # And the two busy workers then become free
    jobs.open_gate(r, "others")
    # Then the 7 quick jobs run on them while the slow one still runs: none waits behind it
    quick_jids = [json.loads(q)["jid"] for q in quick]
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in quick_jids), 10,
             what="the quick jobs run by the idle workers")
    assert slow_jid not in counts(r, jobs.DONE)
    # And when the slow one ends, every job ran exactly once
    jobs.open_gate(r, "slow")
    wait_for(lambda: len(counts(r, jobs.DONE)) == 2 + 31 + 1 + 7, 10, what="all done")
    assert set(counts(r, jobs.RUNS).values()) == {1}
    assert d.stop() == 0
