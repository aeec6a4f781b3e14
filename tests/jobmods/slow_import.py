"""Job code that takes a while to import (as a big application's does), says when it starts
(``t:importing``), and goes on loading until the test opens its gate (``t:import_gate``), so a
test's signal arrives while the import runs however slow the machine is. Gives up after a
minute so a forgotten gate cannot wedge a daemon."""
import time

import queued

_r = queued.get_redis()
_r.set("t:importing", "1")
_end = time.monotonic() + 60
while not _r.exists("t:import_gate"):
    if time.monotonic() > _end:
        raise RuntimeError("the import gate (t:import_gate) was never opened")
    time.sleep(0.01)


class Loaded(queued.Job):
    def perform(self):
        pass
