"""Huey's waiting jobs for scripts/bench_wait.py: ``huey_consumer huey_wait.huey -k thread
-w N -q`` (its threads wait in parallel; -k process cannot also run threads)."""
from huey import RedisHuey

import common

huey = RedisHuey("bench", url=common.URL)


@huey.task()
def wait(total):
    common.wait_bench(total)


BULK_API = "task.map() (one LPUSH per job)"


def one(total):
    wait(total)


def bulk(n, total):
    wait.map([total] * n)
