"""Job code that imports fine in the master but kills every worker at boot: an at-fork hook
exits the child with the status in QUEUED_TEST_FORK_EXIT (3 = queued's "worker boot error",
anything else a plain crash)."""
import os

import queued

_STATUS = int(os.environ.get("QUEUED_TEST_FORK_EXIT", "3"))
os.register_at_fork(after_in_child=lambda: os._exit(_STATUS))


class NeverRuns(queued.Job):
    def perform(self):
        pass
