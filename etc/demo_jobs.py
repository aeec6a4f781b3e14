"""Jobs for the demo (etc/demo.yml). On startup it enqueues a little of everything, and a
ticker keeps enqueueing, so the log shows jobs arriving, running, failing and retrying."""
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
    """Overruns its 1 s time limit: SIGALRM stops it and it goes to the retry set."""
    queued_options = {"timeout": 1.0, "retry": 0}

    def perform(self):
        time.sleep(3)


class Tick(queued.Job):
    """Every 3 s: a few jobs, and itself again (20 times)."""

    def perform(self, n):
        Greet.perform_bulk([[f"tick {n}.{i}"] for i in range(random.randint(1, 4))])
        if n < 20:
            due = time.time() + 3
            Tick.perform_at(due, n + 1)


@queued.on("startup")
def enqueue_examples():
    for name in ("Ada", "Grace", "Linus", "Barbara"):
        Greet.perform_async(name)
    Urgent.perform_async("runs first: critical has twice default's weight")
    for delay in (2, 5):
        due = time.time() + delay
        Scheduled.perform_at(due, due)
    Flaky.perform_async()
    Slow.perform_async()
    Tick.perform_async(1)
    log.info("demo jobs enqueued; Ctrl-C (or kill -TERM %s) to stop", __import__("os").getpid())
