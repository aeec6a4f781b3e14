"""Recycling: a worker that has run its share of jobs (``max_jobs`` plus a random
``max_jobs_jitter``, gunicorn's ``max_requests``), or whose RSS is over ``max_memory_mb`` after a
job (Sidekiq Enterprise's ``SIDEKIQ_MAXMEM_MB``, GitLab's memory killer), leaves between two
jobs; the master forks a fresh one in its slot at once, as for any worker that exits.

The worker decides, not the master: it knows its job count exactly, and it reads its own RSS
right after the job that grew it, before it takes the next one, where a master polling every
worker now and then would let a leaking job run on for a while. It leaves like a worker told
to stop: the job in hand is finished and acked, the rest of its batch goes back to the head of
its queue (nothing lost, nothing run twice).

Reading RSS costs a few microseconds (one read of /proc/self/statm), so it is done after a job
that took RSS_EVERY_JOB or longer (such a job can allocate a lot) and otherwise at most every
RSS_INTERVAL: a stream of 100-microsecond jobs is not slowed by it.
"""
from __future__ import annotations

import os
import random
import time

MiB = 1 << 20
#: RSS is read after every job that ran at least this long (seconds)...
RSS_EVERY_JOB = 0.005
#: ... and otherwise at most this often (seconds).
RSS_INTERVAL = 0.05
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident set size, as ps shows it (shared pages included)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        import psutil
        return psutil.Process().memory_info().rss


class Recycler:
    """One worker's limits, drawn once when it starts."""

    def __init__(self, config, rng: random.Random | None = None, rss=rss_bytes):
        rng = rng or random
        self.jitter = rng.randint(0, config.max_jobs_jitter) if config.max_jobs else 0
        self.max_jobs = config.max_jobs + self.jitter if config.max_jobs else None
        self.max_mb = config.max_memory_mb
        self.rss = rss
        self.jobs = 0
        self.next_check = 0.0

    @classmethod
    def of(cls, config) -> Recycler | None:
        """None when neither limit is set (the worker then does nothing per job)."""
        return cls(config) if config.max_jobs or config.max_memory_mb else None

    def check_start(self) -> str | None:
        """At the worker's start: a fresh worker already over ``max_memory_mb`` would leave
        after every job (a fork per job). Its memory limit is turned off instead, and the
        reason returned for the log."""
        if self.max_mb is None:
            return None
        rss = self.rss()
        if rss <= self.max_mb * MiB:
            return None
        limit, self.max_mb = self.max_mb, None
        return (f"its RSS at start ({rss / MiB:.0f} MiB) is already over max_memory_mb {limit:,}"
                f": it would leave after every job, so the memory limit is off for this worker "
                f"(set max_memory_mb above a fresh worker's RSS)")

    def after_job(self, elapsed: float, now: float | None = None) -> str | None:
        """Why this worker should leave now (a sentence for the log), or None."""
        self.jobs += 1
        if self.max_jobs is not None and self.jobs >= self.max_jobs:
            return (f"ran {self.jobs:,} jobs (max_jobs {self.max_jobs - self.jitter:,} + jitter "
                    f"{self.jitter:,})")
        if self.max_mb is None:
            return None
        now = time.monotonic() if now is None else now
        if elapsed < RSS_EVERY_JOB and now < self.next_check:
            return None
        self.next_check = now + RSS_INTERVAL
        rss = self.rss()
        if rss > self.max_mb * MiB:
            return (f"its RSS is {rss / MiB:.0f} MiB, over max_memory_mb {self.max_mb:,}, "
                    f"after {self.jobs:,} jobs")
        return None
