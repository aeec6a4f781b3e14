"""Jobs for tests/integration/test_sentinel_failover.py. Each run appends "jid pid" to a local
file first: the Redis under test fails over mid-run, and the count of runs must not depend on
it (one short O_APPEND write is atomic). Then it counts itself in Redis through get_redis(),
the job code's own client, which must find the new master too. A daemon loads this file
(``-r``); the tests never import it."""
import os
import time

import queued


RUNS = "t:sentinel:runs"  # hash jid -> runs, written through the job's own get_redis()


class Note(queued.Job):
    def perform(self, path, ms):
        time.sleep(ms / 1000)
        with open(path, "a") as f:
            f.write(f"{self.jid} {os.getpid()}\n")
        queued.get_redis().hincrby(RUNS, self.jid, 1)
