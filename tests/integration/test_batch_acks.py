"""A worker of one job at a time that runs a long batch of short jobs acks the finished ones
as it goes (worker.ACK_AFTER), not only with its next reserve call: a kill -9 then runs
again at most the jobs that finished in its last 20 ms (docs/operating.md, "Delivery
guarantee"), however large the batch (``prefetch``, 32 by default)."""
import json

from ackjobs import SEEN, SeeReserved
from harness import wait_for
from queued.server.worker import ACK_AFTER

JOBS = 120
SECONDS = 0.005  # each job's sleep: a batch of 32 of them runs ~160 ms


def test_a_long_batch_acks_its_finished_jobs_every_20_ms(daemon, producer, r):
    # Given one worker whose batches grow to 32 whatever the machine's load, none of whose
    # jobs counts as one that may run long (jobmods/long_batches.py)
    jids = SeeReserved.perform_bulk([[SECONDS]] * JOBS)
    d = daemon(require=("ackjobs.py", "jobmods/long_batches.py"), concurrency=1, prefetch=32)
    # When it runs 120 jobs of 5 ms, each noting as it starts which jobs are still reserved
    wait_for(lambda: r.hlen(SEEN) == JOBS, 30, what="every job to run")
    seen = {jid: json.loads(v) for jid, v in
            ((k.decode(), v) for k, v in r.hgetall(SEEN).items())}
    assert set(seen) == set(jids)
    # Then the ack of every job had gone out by the end of the first job to end ACK_AFTER
    # after it (the worker checks the time after each job): the job after that one ran its
    # own Redis calls after the ack's, so every job from the one after it on (they run one at
    # a time) saw it no longer reserved, however long the batch (no margin for the load)
    order = sorted(seen.items(), key=lambda item: item[1]["start"])
    checked = 0
    for i, (jid, earlier) in enumerate(order):
        due = next((k for k in range(i + 1, len(order))
                    if order[k][1]["end"] >= earlier["end"] + ACK_AFTER), len(order))
        for _, later in order[due + 2:]:
            assert jid not in later["reserved"], (jid, later["start"] - earlier["end"])
            checked += 1
    # And the rule was put to the test inside batches: jobs that started while finished jobs
    # of the same batch were still reserved (no per-job acks: they ride along within 20 ms)
    unacked = [s for s in seen.values()
               if any(seen[j]["end"] <= s["start"] for j in s["reserved"] if j in seen)]
    assert unacked, "every job's ack went out at once: no batch was seen holding finished jobs"
    assert checked > 0
    assert d.stop() == 0
