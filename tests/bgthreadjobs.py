"""Job code with a thread of the application's own that logs all the time (a library's
reporter, say), started as each worker starts, with the interpreter switching threads every
microsecond so that its records and the worker's done lines meet; and a no-op job."""
import logging
import sys
import threading

import queued


class Noop(queued.Job):
    def perform(self, *args):
        pass


def _chatter():
    log = logging.getLogger("app.background")
    while True:
        log.info("tick")


@queued.on("worker_start")
def _start_chatter():
    sys.setswitchinterval(1e-6)
    threading.Thread(target=_chatter, daemon=True).start()
