"""queued's producer side for scripts/peers/drive.py. The jobs themselves are
scripts/bench_jobs.py (the daemon requires that file), pushed here by class."""
import os
import sys

import queued

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_jobs  # noqa: E402

queued.configure(url=os.environ["BENCH_REDIS_URL"])

BULK_API = "Job.perform_bulk() (one SADD + LPUSH per 1,000 jobs)"


def one(total):
    bench_jobs.BenchJob.perform_async(total)


def bulk(n, total):
    bench_jobs.BenchJob.perform_bulk([[total]] * n)


def pickup(t0):
    bench_jobs.LatencyJob.perform_async(t0)


def schedule(due):
    bench_jobs.LatencyJob.perform_at(due, due)
