"""Job code with the fork hooks (``before_fork`` in the master, ``worker_start`` and
``thread_start`` in each worker), for tests/integration/test_fork_hooks.py. A daemon loads
this file (``-r``); the tests never import it.

Every hook and every job appends one JSON record ``{"what", "pid", "thread"}`` to the Redis
list ``NOTES``, so a test can tell what ran, in which order, in which process and thread.
"""
import json
import os
import threading

import queued

NOTES = "t:forkhooks:notes"


def note(what, **fields):
    queued.get_redis().rpush(NOTES, json.dumps({"what": what, "pid": os.getpid(),
                                                "thread": threading.get_ident(), **fields}))


for _event in ("before_fork", "worker_start", "thread_start"):
    queued.on(_event)(lambda _event=_event: note(_event))


class Noted(queued.Job):
    def perform(self, n):
        note("perform", n=n)
