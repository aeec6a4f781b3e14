"""Job class for tests/integration/test_batch_acks.py: each job writes down, as it starts, which
jobs its worker still holds reserved (so which finished ones are not acked yet), and when it
started and ended on the worker's monotonic clock."""
import json
import time

import queued

SEEN = "t:acks"  # hash jid -> {"start", "end", "reserved": [jids]} (json)
RUNS = "t:runs"  # hash jid -> number of times perform started (as tests/jobs.py)
GATE = "t:gate:"  # key prefix: a gated Step waits until t:gate:<tag> exists


class SeeReserved(queued.Job):
    queued_options = {"retry": 0}

    def perform(self, seconds):
        start = time.monotonic()
        r = queued.get_redis()
        reserved = [json.loads(m.split(b"\0", 2)[2])["jid"]
                    for key in r.scan_iter("queued:reserved:*") for m in r.zrange(key, 0, -1)]
        time.sleep(seconds)
        r.hset(SEEN, self.jid, json.dumps({"start": start, "end": time.monotonic(),
                                           "reserved": reserved}))


class Step(queued.Job):
    """A job of one class that takes ``seconds``, except the one given a ``gate``: it waits
    until the gate opens (the same class: its worker knows the class as a short one)."""
    queued_options = {"retry": 0}

    def perform(self, i, gate=None, seconds=0.0):
        r = queued.get_redis()
        r.hincrby(RUNS, self.jid, 1)
        time.sleep(seconds)
        end = time.monotonic() + 60
        while gate is not None and not r.exists(GATE + gate):
            if time.monotonic() > end:
                raise RuntimeError(f"gate {gate!r} was never opened")
            time.sleep(0.005)
