"""Celery's jobs and producer: ``celery -A celery_jobs worker -P POOL ... -l WARNING``
(scripts/bench_configs.py says which pool and options) with the Redis broker and no result
backend; otherwise Celery's defaults (prefetch multiplier 4, early acks)."""
import datetime

from celery import Celery, group

import common

app = Celery("bench", broker=common.URL)
app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True)


@app.task
def bench(total):
    common.bench(total)


@app.task
def lat(t0):
    common.lat(t0)


# --- producer side (scripts/peers/drive.py) ---
BULK_API = "group().apply_async() (one publish per job)"


def one(total):
    bench.delay(total)


def bulk(n, total):
    group(bench.s(total) for _ in range(n)).apply_async()


def pickup(t0):
    lat.delay(t0)


def schedule(due):
    lat.apply_async((due,), eta=datetime.datetime.fromtimestamp(due, datetime.timezone.utc))
