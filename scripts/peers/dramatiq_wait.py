"""Dramatiq's waiting jobs for scripts/bench_wait.py: ``dramatiq dramatiq_wait -p P -t T``."""
import dramatiq
from dramatiq.brokers.redis import RedisBroker

import common

broker = RedisBroker(url=common.URL)
dramatiq.set_broker(broker)


@dramatiq.actor
def wait(total):
    common.wait_bench(total)


BULK_API = "group().run() (one enqueue per job)"


def one(total):
    wait.send(total)


def bulk(n, total):
    dramatiq.group([wait.message(total) for _ in range(n)]).run()
