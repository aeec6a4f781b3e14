"""queued.server.recycle: when a worker leaves to be replaced (its RSS and clock injected)."""
from __future__ import annotations

import random

from queued import config
from queued.server.recycle import MiB, RSS_INTERVAL, Recycler, rss_bytes


def cfg(**settings):
    return config.from_dict(settings, environ={})


def test_off_by_default_and_the_worker_then_does_nothing_per_job():
    assert Recycler.of(cfg()) is None
    assert cfg(max_jobs=0, max_memory_mb=0).max_jobs is None  # 0 means off, like null


def test_max_jobs_plus_a_jitter_drawn_once_per_worker():
    limits = set()
    for seed in range(40):
        rec = Recycler(cfg(max_jobs=5, max_jobs_jitter=3), random.Random(seed))
        reasons = [rec.after_job(0.0, now=0.0) for _ in range(rec.max_jobs)]
        # leaves after exactly its own limit, which is max_jobs + 0..jitter
        assert reasons[:-1] == [None] * (rec.max_jobs - 1) and reasons[-1]
        assert 5 <= rec.max_jobs <= 8
        assert reasons[-1] == f"ran {rec.max_jobs} jobs (max_jobs 5 + jitter {rec.jitter})"
        limits.add(rec.max_jobs)
    assert limits == {5, 6, 7, 8}  # each worker its own: they do not all leave at once


def test_memory_is_read_after_a_long_job_and_at_most_every_interval_after_short_ones():
    reads = []
    size = [100 * MiB]

    def rss():
        reads.append(1)
        return size[0]

    rec = Recycler(cfg(max_memory_mb=150), rss=rss)
    # 1000 short jobs within one interval: one read, not a thousand
    for i in range(1000):
        assert rec.after_job(0.0001, now=10.0 + i * RSS_INTERVAL / 2000) is None
    assert len(reads) == 1
    # a job that took long (it may have allocated a lot) is followed by a read at once
    size[0] = 151 * MiB
    assert rec.after_job(0.2, now=10.001) == ("its RSS is 151 MiB, over max_memory_mb 150, "
                                              "after 1,001 jobs")


def test_a_limit_below_a_fresh_workers_rss_is_turned_off_not_obeyed_after_every_job():
    rec = Recycler(cfg(max_memory_mb=10), rss=lambda: 40 * MiB)
    why = rec.check_start()
    assert "RSS at start (40 MiB) is already over max_memory_mb 10" in why
    assert rec.after_job(1.0, now=0.0) is None
    assert Recycler(cfg(max_memory_mb=100), rss=lambda: 40 * MiB).check_start() is None


def test_rss_is_this_processes_resident_size():
    import psutil
    assert abs(rss_bytes() - psutil.Process().memory_info().rss) < 20 * MiB
