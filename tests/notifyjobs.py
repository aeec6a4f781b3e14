"""Job code for tests/integration/test_systemd_notify.py: the ordinary test jobs, a job that
says what systemd's variables look like inside a worker, and a heartbeat hook that wedges the
master's loop while the Redis key ``WEDGE`` exists (a hook that hangs: what the watchdog is
for). A daemon loads this file (``-r``); the tests never import it."""
import json
import os
import time

import queued
import jobs  # noqa: F401 - registers Record, Gate, ... in the same daemon

WEDGE = "t:notify:wedge"
SEEN = "t:notify:env"
ENV_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class ShowEnv(queued.Job):
    def perform(self):
        queued.get_redis().rpush(SEEN, json.dumps({v: os.environ.get(v) for v in ENV_VARS}))


@queued.on("heartbeat")
def wedge_while_told():
    r = queued.get_redis()
    if not r.exists(WEDGE):
        return
    r.rpush(WEDGE + ":began", os.getpid())
    while r.exists(WEDGE):
        time.sleep(0.05)
