"""Job classes for tests/integration/test_threads_ahead.py: a running job that acts the moment
its worker holds jobs ahead of its busy lanes (reserved, not started: dispatch.py). Those are
held for at most EXTRA_HOLD (0.1 s); the job sees them from inside the worker, polling every
millisecond, so a test acts inside that window on an event instead of on its own polling."""
import json
import os
import signal
import time

import queued
from jobs import GATE, RUNS, _finish, _r, _start
from queued.keys import Keys

ACTED = "t:acted"   # set once: the jid of the job that acted (a rerun of it only waits)
HELD = "t:held"     # list: the jids it saw held as it acted


def held_jids(r, pattern: str, marker: str, lanes: int) -> list[str]:
    """Jids of jobs whose first argument is ``marker``, reserved by a worker and not started,
    once the only started jobs still reserved are the ``lanes`` running ones (the acks of the
    jobs before have gone out: a finished job still reserved would go back and run again)."""
    started = r.hkeys(RUNS)
    found, running = [], 0
    for key in r.keys(pattern):
        for member in r.zrange(key, 0, -1):
            msg = json.loads(member.split(b"\0", 2)[2])
            if msg["jid"].encode() in started:
                running += 1
            elif msg["args"][:1] == [marker]:
                found.append(msg["jid"])
    return found if running == lanes else []


class ActWhenHeld(queued.Job):
    """Once jobs of ``marker`` are held ahead of ``lanes`` busy lanes (held_jids), records
    their jids and does ``steps`` in order, each ``[action, whom]``: an action is a signal
    name, or "pause" (the queue ``whom`` is paused, as the admin API does); ``whom`` of a
    signal is "master" or "self". Only the first run acts. Then it holds its lane until the
    gate ``tag`` opens."""
    queued_options = {"retry": 0}

    def perform(self, pattern, marker, lanes, steps, tag, seconds=60):
        _start(self)
        r = _r()
        if r.set(ACTED, self.jid, nx=True):
            end = time.monotonic() + seconds
            while not (held := held_jids(r, pattern, marker, lanes)):
                if time.monotonic() > end:
                    raise RuntimeError(f"no job of {marker!r} was ever held")
                time.sleep(0.001)
            r.rpush(HELD, *held)
            for action, whom in steps:
                if action == "pause":
                    r.sadd(Keys().paused, whom)
                else:
                    os.kill(os.getppid() if whom == "master" else os.getpid(),
                            getattr(signal, "SIG" + action))
        end = time.monotonic() + seconds
        while not r.exists(GATE + tag):
            if time.monotonic() > end:
                raise RuntimeError(f"gate {tag!r} was never opened")
            time.sleep(0.01)
        _finish(self)
