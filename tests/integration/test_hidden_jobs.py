"""No job waits behind another while a worker that could run it is idle (issue 16: a worker held
seven quick jobs for 12 s behind a sleep(12) while two workers sat idle), and what a worker
holds is visible."""
import json

import jobs
import pytest

from harness import counts, wait_for


def payload(producer, klass, *args) -> bytes:
    return json.dumps(producer.normalize({"class": klass, "args": list(args)})).encode()


def reserved_by_slot(r) -> dict[str, set[str]]:
    """The jids each worker slot holds reserved: {reserved key: {jid}}."""
    return {k.decode(): {json.loads(m.split(b"\0", 2)[2])["jid"] for m in r.zrange(k, 0, -1)}
            for k in r.scan_iter("queued:reserved:*")}


def queued_jids(r) -> list[str]:
    return [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)]


@pytest.mark.parametrize("shape", [{"concurrency": 3}, {"concurrency": 1, "threads": 3}],
                         ids=["processes", "threads"])
def test_jobs_reserved_behind_a_slow_one_go_to_an_idle_worker(daemon, producer, r, shape):
    # Given three workers (or lanes) of one job at a time, two of them busy (each on a job held
    # until its gate opens), the third idle; batches that grow whatever the machine's load
    # (jobmods/steady_batches.py: a held job gives its batch back after 2 s)
    d = daemon(require=("jobs.py", "jobmods/steady_batches.py"), **shape)
    busy = [jobs.Gate.perform_async("others") for _ in range(2)]
    wait_for(lambda: all(j in counts(r, jobs.RUNS) for j in busy), 10, what="two busy")
    # When 31 quick jobs (the idle worker's batches grow over them: 1+2+4+8+16), then a
    # slow one, then 7 quick ones are pushed in one command
    slow = payload(producer, "Gate", "slow")
    quick = [payload(producer, "Record", "after") for _ in range(7)]
    fill = [payload(producer, "Record", "fill") for _ in range(31)]
    r.lpush("queue:default", *fill, slow, *quick)
    slow_jid = json.loads(slow)["jid"]
    quick_jids = [json.loads(q)["jid"] for q in quick]
    wait_for(lambda: slow_jid in counts(r, jobs.RUNS), 10, what="the slow job running")
    if "threads" not in shape:
        # Then a worker of one job at a time reserved the slow one with the 7 quick ones behind
        # it, in one batch (checked before the 2 s a held job keeps its batch)
        holder = [js for js in reserved_by_slot(r).values() if slow_jid in js]
        assert holder == [{slow_jid, *quick_jids}]
    # And while both other workers are busy, the 7 quick ones wait in the queue, none run: a
    # worker of many jobs reserves only for a free lane; a worker of one job at a time gave
    # them back (giveback.py)
    wait_for(lambda: queued_jids(r) == quick_jids[::-1], 10, what="the quick jobs queued")
    assert not set(quick_jids) & set(counts(r, jobs.RUNS))
    assert not set(quick_jids) & set().union(*reserved_by_slot(r).values())
    # And when the two busy workers then become free
    jobs.open_gate(r, "others")
    # Then the 7 quick jobs run on them while the slow one still runs: none waits behind it
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in quick_jids), 10,
             what="the quick jobs run by the idle workers")
    assert slow_jid not in counts(r, jobs.DONE)
    # And when the slow one ends, every job ran exactly once
    jobs.open_gate(r, "slow")
    wait_for(lambda: len(counts(r, jobs.DONE)) == 2 + 31 + 1 + 7, 10, what="all done")
    assert set(counts(r, jobs.RUNS).values()) == {1}
    assert d.stop() == 0
