"""Job classes the producer/server interop tests run inside real queued daemons (``require``
this file through ``realsidekiq.WIRE_REQUIRE``; the tests never import it, so these classes are
not registered in the test process).

Their names are the Ruby and PHP producers' class names. Each job appends what it saw to the
Redis list ``SEEN`` as JSON, so a test can compare it with what the producer meant: Python's
``json`` keeps ``1`` and ``1.0`` apart, integers of any size, NUL and emoji, and key order.
"""
import json
import time

import queued

SEEN = "t:wire:seen"  # list of {"class","jid","queue","args","msg","t"}, in run order
GATE = "t:gate:"      # as tests/jobs.py: an InteropGate job runs until t:gate:<tag> exists


def record(job, args) -> None:
    queued.get_redis().rpush(SEEN, json.dumps(
        {"class": job.msg["class"], "jid": job.jid, "queue": job.queue, "args": list(args),
         "msg": job.msg, "t": time.time()}, ensure_ascii=False))


class InteropRecord(queued.Job):
    """Succeeds; records its args."""

    def perform(self, *args):
        record(self, args)


class InteropFail(queued.Job):
    """Always fails (after recording). The retry option comes from the producer's payload."""

    @classmethod
    def retry_in(cls, count, exc):
        return 1  # plus Sidekiq's jitter of up to 9 s: the tests make retries due by hand

    def perform(self, *args):
        record(self, args)
        raise RuntimeError(f"interop failure {args[0] if args else ''}")


class CrossJob(queued.Job):
    """Also served by real Sidekiq (realsidekiq.WORKERS_RB) under the same name: fails here
    when ``fail_in`` names "python", with the message the Ruby class raises."""

    def perform(self, tag, fail_in):
        record(self, [tag, fail_in])
        if "python" in fail_in:
            raise RuntimeError(f"cross failure {tag}")


class InteropGate(queued.Job):
    """Records, then runs until the test opens its gate (tests/jobs.py's ``open_gate``):
    long enough to be seen by a heartbeat, however slow the machine. Fails after
    ``seconds`` if the gate never opens."""

    def perform(self, tag, seconds=60):
        record(self, [tag, seconds])
        end = time.monotonic() + seconds
        while not queued.get_redis().exists(GATE + tag):
            if time.monotonic() > end:
                raise RuntimeError(f"gate {tag!r} was never opened")
            time.sleep(0.01)
