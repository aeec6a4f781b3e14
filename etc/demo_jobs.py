"""Jobs for the demo (etc/demo.yml). On startup it enqueues a little of everything, and a
ticker keeps enqueueing, so the log shows jobs arriving, running, failing and retrying."""
import asyncio
import logging
import random
import time

import queued

log = logging.getLogger("demo")


class Greet(queued.Job):
    def perform(self, name):
        log.info("hello, %s (jid %s from queue %s)", name, self.jid, self.queue)


class Urgent(queued.Job):
    queued_options = {"queue": "critical"}

    def perform(self, what):
        log.info("urgent: %s", what)


class Scheduled(queued.Job):
    def perform(self, due):
        log.info("scheduled job ran %.1f ms after its time", (time.time() - due) * 1000)


class Flaky(queued.Job):
    """Fails on its first try; the retry (in about 2-11 s) succeeds."""
    queued_options = {"retry": 3, "backtrace": 5}

    @classmethod
    def retry_in(cls, count, exc):
        return 2

    def perform(self):
        if not self.msg.get("retry_count") and self.msg.get("retry_count") != 0:
            raise RuntimeError("first try fails on purpose; watch the retry")
        log.info("flaky job succeeded on retry %s", self.msg["retry_count"] + 1)


class Slow(queued.Job):
    """Overruns its 1 s time limit: JobTimeout is raised in it (SIGALRM in a worker of one job
    at a time; on a job thread, by the worker's watchdog, once sleep returns) and it goes to
    dead (retry 0)."""
    queued_options = {"timeout": 1.0, "retry": 0}

    def perform(self):
        time.sleep(3)


class FetchQuote(queued.Job):
    """An async job: awaits (as on an HTTP call) on its worker's event loop, beside the sync
    jobs on its threads. (An async job's own Redis client is queued.get_async_redis().)"""

    async def perform(self, symbol):
        await asyncio.sleep(random.uniform(0.2, 1.0))  # the "request"
        log.info("async: %s is at %.2f", symbol, random.uniform(10, 500))


class SlowQuote(queued.Job):
    """An async job past its 1 s time limit: its task is cancelled (JobTimeout), its finally
    clause runs, and it goes to dead (retry 0)."""
    queued_options = {"timeout": 1.0, "retry": 0}

    async def perform(self, symbol):
        try:
            await asyncio.sleep(5)
        finally:
            log.info("async: %s cancelled at its time limit, cleaning up", symbol)


class Tick(queued.Job):
    """Every 3 s: a few jobs, and itself again (20 times)."""

    def perform(self, n):
        Greet.perform_bulk([[f"tick {n}.{i}"] for i in range(random.randint(1, 4))])
        if n < 20:
            due = time.time() + 3
            Tick.perform_at(due, n + 1)


class RegisterProduct(queued.Job):
    """One product of a promotion (seed 000): a task of 30 of them; a few are refused
    (queued.JobFailed: a business failure, not retried), each says what it did."""

    def perform(self, sku, price):
        self.say(f"checking {sku} at {price:.2f}")
        time.sleep(random.uniform(0.2, 0.8))  # slow enough to watch the bar fill
        if price < 5:
            raise queued.JobFailed(f"{sku}: price {price:.2f} is below cost")
        self.say(f"{sku} registered")


class PromotionDone(queued.Job):
    """The task's on_complete callback: runs once, when every product has its fate."""

    def perform(self, task_id, summary):
        log.info("promotion task %s complete: %d registered, %d refused, %d errors",
                 task_id, summary["finished"], summary["failed"], summary["error"])


@queued.on("startup")
def enqueue_examples():
    task = queued.Task("promotion 42: register 30 products", on_complete=PromotionDone)
    with task:
        RegisterProduct.perform_bulk([[f"SKU-{i:03}", 2.0 + i * 1.7] for i in range(30)])
    log.info("a task of 30 jobs: queuedctl -C etc/demo.yml task %s --watch", task.id)
    for name in ("Ada", "Grace", "Linus", "Barbara"):
        Greet.perform_async(name)
    Urgent.perform_async("runs first: critical has twice default's weight")
    for delay in (2, 5):
        due = time.time() + delay
        Scheduled.perform_at(due, due)
    Flaky.perform_async()
    Slow.perform_async()
    FetchQuote.perform_bulk([[symbol] for symbol in ("ACME", "INITECH", "UMBRELLA", "HOOLI")])
    SlowQuote.perform_async("GLOBEX")
    Tick.perform_async(1)
    log.info("demo jobs enqueued; Ctrl-C (or kill -TERM %s) to stop", __import__("os").getpid())
