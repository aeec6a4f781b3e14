"""RQ's jobs and producer, for ``rq worker --with-scheduler`` processes (scripts/bench_configs.py
says how many, and which Worker class: the default forks a work horse per job,
SimpleWorker runs the job in the worker)."""
import datetime

from rq import Queue

import common

queue = Queue("default", connection=common.R)


def bench(total):
    common.bench(total)


def lat(t0):
    common.lat(t0)


# --- producer side (scripts/peers/drive.py) ---
BULK_API = "Queue.enqueue_many() (one pipeline)"


def one(total):
    queue.enqueue(bench, total)


def bulk(n, total):
    queue.enqueue_many([Queue.prepare_data(bench, (total,)) for _ in range(n)])


def pickup(t0):
    queue.enqueue(lat, t0)


def schedule(due):
    queue.enqueue_at(datetime.datetime.fromtimestamp(due, datetime.timezone.utc), lat, due)
