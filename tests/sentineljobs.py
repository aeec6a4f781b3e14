"""Jobs for tests/integration/test_sentinel_failover.py. Each run appends "jid pid" to a local
file, not to Redis: the Redis under test fails over mid-run, and a job's own bookkeeping must
neither fail with it nor be lost with it (one short O_APPEND write is atomic). A daemon loads
this file (``-r``); the tests never import it."""
import os
import time

import queued


class Note(queued.Job):
    def perform(self, path, ms):
        time.sleep(ms / 1000)
        with open(path, "a") as f:
            f.write(f"{self.jid} {os.getpid()}\n")
