"""Jobs for tests/integration/test_recycling.py: each run appends {jid, pid, rss_mb} to the
Redis list RAN (in run order per worker); Hog keeps 50 MB more of its worker's memory per
run, as a leaking job does. A daemon loads this file (``-r``); the tests never import it."""
import json
import os

import queued
from queued.server.recycle import MiB, rss_bytes

RAN = "t:recycle:ran"
KEPT = []


def _note(job):
    queued.get_redis().rpush(RAN, json.dumps(
        {"jid": job.jid, "pid": os.getpid(), "rss_mb": rss_bytes() / MiB,
         "class": type(job).__name__}))


class Hog(queued.Job):
    def perform(self, *args):
        KEPT.append(b"x" * (50 * MiB))  # written, so resident (calloc'd pages would not be)
        _note(self)


class WhoRan(queued.Job):
    def perform(self, *args):
        _note(self)
