"""Job classes for tests/integration/test_batch_acks.py and test_logs.py: each SeeReserved job
writes down, as it starts, which jobs its worker still holds reserved (so which finished ones
are not acked yet), and when it started and ended on the worker's monotonic clock; Step jobs
are one class whose one gated job turns slow."""
import json
import time

import queued
from jobs import RUNS, wait_gate
from queued.keys import Keys

SEEN = "t:acks"  # hash jid -> {"start", "end", "reserved": [jids]} (json)
RESERVED = Keys().reserved("*", "*")  # (a pattern: every slot of every master)


def reserved_jids(r) -> list[str]:
    """The jids every worker slot holds reserved now."""
    return [json.loads(m.split(b"\0", 2)[2])["jid"]
            for key in r.scan_iter(RESERVED) for m in r.zrange(key, 0, -1)]


class SeeReserved(queued.Job):
    queued_options = {"retry": 0}

    def perform(self, seconds):
        start = time.monotonic()
        r = queued.get_redis()
        reserved = reserved_jids(r)
        time.sleep(seconds)  # (the workload: a job of this length)
        r.hset(SEEN, self.jid, json.dumps({"start": start, "end": time.monotonic(),
                                           "reserved": reserved}))


class Step(queued.Job):
    """A job of one class that takes ``seconds``, except the one given a ``gate``: it waits
    until the gate opens (the same class: its worker knows the class as a short one)."""
    queued_options = {"retry": 0}

    def perform(self, i, gate=None, seconds=0.0):
        queued.get_redis().hincrby(RUNS, self.jid, 1)
        time.sleep(seconds)  # (the workload: a job of this length)
        if gate is not None:
            wait_gate(gate)


class HookAtGate(queued.Job):
    """Succeeds at once; its after_succeeded hook then waits at the gate ``gate`` (its ack is
    queued before the hook runs, and may go out meanwhile)."""
    queued_options = {"retry": 0}

    def perform(self, gate):
        queued.get_redis().hincrby(RUNS, self.jid, 1)

    def after_succeeded(self):
        wait_gate(self.msg["args"][0])


class AsyncHookAtGate(queued.Job):
    """HookAtGate with ``async def perform`` and an async hook (run_async's path)."""
    queued_options = {"retry": 0}

    async def perform(self, gate):
        queued.get_redis().hincrby(RUNS, self.jid, 1)

    async def after_succeeded(self):
        import asyncio
        from jobs import GATE
        while not queued.get_redis().exists(GATE + self.msg["args"][0]):
            await asyncio.sleep(0.01)
