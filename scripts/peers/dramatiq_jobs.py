"""Dramatiq's jobs and producer: ``dramatiq dramatiq_jobs -p P -t T`` (scripts/bench_configs.py
says which P, T and prefetch). The Redis broker with its default middleware."""
import math
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

import common

broker = RedisBroker(url=common.URL)
dramatiq.set_broker(broker)


@dramatiq.actor
def bench(total):
    common.bench(total)


@dramatiq.actor
def lat(t0):
    common.lat(t0)


# --- producer side (scripts/peers/drive.py) ---
BULK_API = "group().run() (one enqueue per job)"


def one(total):
    bench.send(total)


def bulk(n, total):
    dramatiq.group([bench.message(total) for _ in range(n)]).run()


def pickup(t0):
    lat.send(t0)


def schedule(due):
    # Dramatiq takes a delay in whole milliseconds: round up so nothing is due early.
    lat.send_with_options(args=(due,), delay=max(0, math.ceil((due - time.time()) * 1000)))
