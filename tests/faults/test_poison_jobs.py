"""Jobs that kill or wedge their worker: segfault, os._exit, SIGALRM blocked, the timeout
exception swallowed, memory without end (MemoryError under RLIMIT_AS, or the OOM killer's
SIGKILL). The worker is replaced if it died, the job takes the failure path, a job that keeps
killing its worker ends in dead (a poison pill) with a reason that says so, and the other jobs
are served meanwhile."""
import json
import time

import pytest
from faults import faultjobs
from faults.common import (JOBS, Tally, all_workers, done_count, held, log_lines, per_jid,
                           queued_jobs, report)

from harness import wait_for

AROUND = 300  # ordinary jobs pushed before and after the bad one

# kind -> (job class, args, extra job modules, error_class, message part, runs, worker dies)
KINDS = {
    "segfault": (faultjobs.Segfault, [], (), "WorkerKilled",
                 "killed its worker 3 times (last: killed by SIGSEGV)", 3, True),
    "os._exit": (faultjobs.HardExit, [], (), "WorkerKilled",
                 "killed its worker 3 times (last: exit code 9)", 3, True),
    "OOM-killed": (faultjobs.OomKilled, [200], (), "WorkerKilled",
                   "killed its worker 3 times (last: killed by SIGKILL (out of memory?))", 3,
                   True),
    "blocks SIGALRM": (faultjobs.BlocksAlarm, [], (), "JobTimeout",
                       "ran past its 0.5s timeout and did not stop at SIGALRM; its worker was "
                       "killed after 0.5s more", 1, True),
    "swallows the timeout": (faultjobs.IgnoresTimeout, [], (), "JobTimeout",
                             "ran past its 0.5s timeout and did not stop at SIGALRM; its worker was "
                             "killed after 0.5s more", 1, True),
    "MemoryError (RLIMIT_AS)": (faultjobs.Hog, [], ("faults/memlimit.py",), "MemoryError", "",
                                1, False),
    # (the failure path ran with the hog's memory still held by the job's frame: under load
    # it failed too, and the job ended as WorkerKilled)
    "MemoryError, no room left": (faultjobs.Brim, [], ("faults/memlimit.py",), "MemoryError",
                                  "", 1, False),
}
WHAT = {
    "segfault": "a job that segfaults (reads address 0)",
    "os._exit": "a job that calls os._exit(9)",
    "OOM-killed": "a job that allocates without end until SIGKILLed at 200 MB (the OOM "
                  "killer's way)",
    "blocks SIGALRM": "a job that blocks SIGALRM past its 0.5 s timeout",
    "swallows the timeout": "a job that catches JobTimeout and goes on",
    "MemoryError (RLIMIT_AS)": "a job that allocates without end under RLIMIT_AS "
                               "(worker size + 256 MiB)",
    "MemoryError, no room left": "a job that fills RLIMIT_AS (worker size + 256 MiB) to its "
                                 "last KiB",
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_job_that_kills_or_wedges_its_worker_ends_in_dead_and_others_are_served(
        daemon, producer, r, kind):
    job, args, extra, error_class, message, runs, dies = KINDS[kind]
    # Given a daemon with 2 workers, max_crashes 3 and a 0.5 s timeout grace
    d = daemon(require=JOBS + extra, concurrency=2, max_crashes=3, timeout_grace=0.5)
    first_workers = all_workers(d, 2)
    # When the bad job is pushed between ordinary jobs
    before = faultjobs.Tick.perform_bulk([[i, 2] for i in range(AROUND)])
    pushed = time.monotonic()
    bad = job.perform_async(*args)
    after = faultjobs.Tick.perform_bulk([[i, 2] for i in range(AROUND)])
    # Then it lands in dead with a reason that says what happened, after `runs` runs
    entry = wait_for(lambda: r.zrange("dead", 0, -1), 30, what="the bad job in dead")
    in_dead = time.monotonic() - pushed
    assert len(entry) == 1
    entry = json.loads(entry[0])
    assert entry["jid"] == bad and entry["error_class"] == error_class, entry
    assert message in entry["error_message"], entry["error_message"]
    assert per_jid(r, faultjobs.STARTS)[bad] == runs
    # And every other job ran, each once, and nothing is left anywhere
    others = before + after
    wait_for(lambda: done_count(r) == len(others), 30, what="the other jobs")
    tally = Tally(r, others)
    assert tally.lost == set() and tally.twice == set()
    wait_for(lambda: held(r) == 0, 5, what="no job held")
    assert queued_jobs(r) == 0 and r.zcard("retry") == 0
    # And a worker that died was replaced at once (no boot backoff), one that survived
    # serves on
    wait_for(lambda: len(d.worker_pids()) == 2, 5, what="two workers")
    out = d.output()
    assert "respawning in" not in out
    if dies:
        assert set(d.worker_pids()) - first_workers
    else:
        assert set(d.worker_pids()) == first_workers
        assert f"jid={bad}" in "\n".join(log_lines(out, f"fail: {error_class}"))
    assert d.stop() == 0
    report(WHAT[kind] + f", among {len(others)} ordinary jobs; 2 workers, max_crashes 3",
           len(others) + 1, f"{len(tally.run)} + the bad one in dead", len(tally.lost),
           len(tally.twice),
           f"in dead after {runs} run(s), {in_dead:.1f} s after the push, as {error_class}; "
           + ("its worker replaced each time" if dies else "its worker lived on"))
