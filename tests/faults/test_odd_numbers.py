"""Numbers in a payload that no producer of ours writes, from a producer that is not ours (a
hand-written PHP push, a Ruby app's own key): each is ignored or clamped to something usable,
never a crash, a hot loop or a worker that takes the job again and again (red team rt3 #2: a
``unique_for`` of 1e308 raised OverflowError on every take, 1e20 made Redis refuse the lock's
expiry "out of range", and the job stayed at the head of its queue)."""
import json

import pytest

from faults import faultjobs
from faults.common import JOBS, Tally, all_workers, held, queued_jobs

from harness import wait_for, zmembers

HUGE_INT = 10**400   # JSON integers have no size limit; Python's float() of it overflows
# field -> values a job that succeeds carries: it runs once, as if the field were sane
RUNS = {
    "unique_for": [1e308, 1e20, 10**20, HUGE_INT, 1e12],
    "expires_at": [1e308, HUGE_INT, 10**20],
    "timeout": [1e308, HUGE_INT, 1e12],
}
# retry_count of a job that fails with retries left: it waits in retry (at a finite time)
RETRIES = [HUGE_INT, 1e308]
# overrated of a job over its limiter's limit: past its reschedules it dies (retry: 0)
OVERRATED = [HUGE_INT, 1e308]


def raw(klass, jid, **fields):
    """A payload as a hand-written producer pushes it (json.dumps writes the big numbers
    as they are: 1e+308, 100...0)."""
    return json.dumps({"class": klass, "args": [jid], "queue": "default", "jid": jid,
                       **fields})


@pytest.mark.parametrize("threads", [1, 2])
def test_odd_numbers_in_a_payload_never_wedge_a_worker(daemon, producer, r, threads):
    # Given a daemon of one process (a wedged worker would starve the queue)
    d = daemon(require=JOBS, concurrency=1, threads=threads)
    workers = all_workers(d, 1)
    runs, retried, dead, good = [], [], [], []
    # When payloads with odd numbers are pushed, each followed by an ordinary job
    n = 0
    for field, values in RUNS.items():
        for value in values:
            n += 1
            runs.append(f"{n:024x}")
            producer.push_raw("default", raw("Tick", runs[-1], **{field: value}))
            good.append(faultjobs.Tick.perform_async(n))
    for value in RETRIES:
        n += 1
        retried.append(f"{n:024x}")
        producer.push_raw("default", raw("Fails", retried[-1], retry=HUGE_INT * 10,
                                         retry_count=value))
        good.append(faultjobs.Tick.perform_async(n))
    for value in OVERRATED:
        n += 1
        dead.append(f"{n:024x}")
        producer.push_raw("default", raw("OverLimited", dead[-1], overrated=value))
        good.append(faultjobs.Tick.perform_async(n))
    # Then every ordinary job runs, and each odd one runs once as if its number were sane
    wait_for(lambda: Tally(r, runs + good).lost == set(), 20,
             what="the odd jobs that succeed and the ordinary ones")
    tally = Tally(r, runs + good)
    assert tally.twice == set()
    # And a failing one waits in retry, at a time Redis and Python can both hold
    wait_for(lambda: r.zcard("retry") == len(retried), 10, what="the retries")
    entries = {json.loads(m)["jid"]: s for m, s in zmembers(r, "retry")}
    assert sorted(entries) == retried
    assert all(s < 1e12 for s in entries.values()), entries
    # And one over its limit dies once past its reschedules (its overrated is past them, or
    # not a count at all)
    wait_for(lambda: r.zcard("dead") == len(dead), 10, what="the over-limit jobs in dead")
    assert sorted(json.loads(m)["jid"] for m, _ in zmembers(r, "dead")) == dead
    # And nothing is left held, queued or locked; the one worker never died
    wait_for(lambda: held(r) == 0 and queued_jobs(r) == 0, 10, what="nothing held")
    assert r.keys("queued:unique:*") == []
    assert set(d.worker_pids()) == workers
    out = d.output()
    for trouble in ("died", "OverflowError", "out of range", "could not be written",
                    "Redis refused"):
        assert trouble not in out, (trouble, out[-3000:])
    assert len(out.splitlines()) < 300  # (a threaded worker looping wrote 290k lines in 10 s)
    assert d.stop() == 0
