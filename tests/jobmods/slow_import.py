"""Job code that takes seconds to import (as a big application does), and says when it starts,
so a test can signal the daemon while it loads."""
import time

import queued

queued.get_redis().set("t:importing", "1")
time.sleep(3)


class Loaded(queued.Job):
    def perform(self):
        pass
