"""Workers SIGKILLed again and again under load: every job still runs, none is lost."""
import os
import random
import signal
import statistics
import threading
import time

from faults import faultjobs
from faults.common import JOBS, Tally, done_count, held, log_lines, queued_jobs, report

from harness import title, wait_for

JOBS_IN = 3000
CONCURRENCY = 3


class Killer(threading.Thread):
    """SIGKILLs a random busy worker of the daemon (its title names the job it runs) every
    200-400 ms; notes how long the master took to fork its replacement (for the report)."""

    def __init__(self, daemon):
        super().__init__(daemon=True)
        self.d = daemon
        self.stop = threading.Event()
        self.kills = 0
        self.replaced_ms: list[float] = []
        self.rng = random.Random(1234)

    def run(self):
        while not self.stop.wait(self.rng.uniform(0.2, 0.4)):
            before = set(self.d.worker_pids())
            busy = sorted(p for p in before if title(p).endswith(": Tick"))
            if not busy:
                continue
            victim = self.rng.choice(busy)
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills += 1
            t0 = time.monotonic()
            while not self.stop.is_set() and time.monotonic() - t0 < 0.2:
                if set(self.d.worker_pids()) - before:
                    self.replaced_ms.append((time.monotonic() - t0) * 1000)
                    break
                time.sleep(0.002)


def test_thousands_of_jobs_while_workers_are_sigkilled_every_few_hundred_ms(
        daemon, producer, r):
    # Given 3000 jobs of 0-9 ms (short ones are prefetched in batches of up to 32, whose acks
    # are written behind) and a daemon with 3 workers
    jids = faultjobs.Tick.perform_bulk([[i, i % 10] for i in range(JOBS_IN)])
    d = daemon(require=JOBS, concurrency=CONCURRENCY)
    # When a random worker is SIGKILLed every 200-400 ms until the queue is done
    killer = Killer(d)
    t0 = time.monotonic()
    killer.start()
    try:
        wait_for(lambda: done_count(r) == JOBS_IN, 180, interval=0.1, what="every job to run")
    finally:
        killer.stop.set()
        killer.join(5)
    took = time.monotonic() - t0
    # Then every jid ran to the end at least once, and nothing is left anywhere
    tally = Tally(r, jids)
    assert tally.lost == set()
    assert killer.kills >= 10, killer.kills
    wait_for(lambda: held(r) == 0, 10, what="no job held")
    assert queued_jobs(r) == 0 and r.zcard("retry") == 0 and r.zcard("dead") == 0
    # And every kill was seen, its jobs put back, the worker replaced without a boot backoff
    # (a worker killed in a job did boot: its death is the job's, not a boot failure)
    out = d.output()
    died = log_lines(out, "died (killed by SIGKILL", "master")
    assert len(died) == killer.kills, (len(died), killer.kills)
    assert "respawning in" not in out
    wait_for(lambda: len(d.worker_pids()) == CONCURRENCY, 10, what="all workers back")
    assert d.stop() == 0
    report(f"{JOBS_IN} jobs (0-9 ms), {CONCURRENCY} workers, a random worker SIGKILLed every "
           f"200-400 ms ({killer.kills} kills)", JOBS_IN, len(tally.run), len(tally.lost),
           f"{len(tally.twice)} ({len(tally.twice) / JOBS_IN:.1%})",
           (f"new worker forked {statistics.median(killer.replaced_ms):.0f} ms (median), "
            f"{max(killer.replaced_ms):.0f} ms (max) after each kill" if killer.replaced_ms
            else "no new worker seen within 200 ms of a kill") + f"; all done in {took:.1f} s")
