"""queued's producer side for scripts/bench_wait.py (drive.py MODULE fill ...): waiting jobs,
sync (bench_jobs.WaitJob) or, with BENCH_ASYNC=1, async (bench_jobs.AsyncWaitJob)."""
import os
import sys

import queued

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_jobs  # noqa: E402

queued.configure(url=os.environ["BENCH_REDIS_URL"])
JOB = bench_jobs.AsyncWaitJob if os.environ.get("BENCH_ASYNC") == "1" else bench_jobs.WaitJob
BULK_API = "Job.perform_bulk() (one SADD + LPUSH per 1,000 jobs)"


def one(total):
    JOB.perform_async(total)


def bulk(n, total):
    JOB.perform_bulk([[total]] * n)
