"""Huey's jobs and producer: ``huey_consumer huey_jobs.huey -k KIND -w N -q``
(scripts/bench_configs.py says which). RedisHuey's defaults (blocking BRPOP with a 1 s read
timeout; results on, but a task returning None stores nothing)."""
import datetime

from huey import RedisHuey

import common

huey = RedisHuey("bench", url=common.URL)


@huey.task()
def bench(total):
    common.bench(total)


@huey.task()
def lat(t0):
    common.lat(t0)


# --- producer side (scripts/peers/drive.py) ---
BULK_API = "task.map() (one LPUSH per job)"


def one(total):
    bench(total)


def bulk(n, total):
    bench.map([total] * n)


def pickup(t0):
    lat(t0)


def schedule(due):
    lat.schedule(args=(due,), eta=datetime.datetime.fromtimestamp(due, datetime.timezone.utc))
