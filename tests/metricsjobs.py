"""Job classes of the metrics tests (tests/integration/test_metrics_daemon.py)."""
import time

import queued

DONE = "t:metrics-done"  # a counter of finished MetricsOk runs


class MetricsOk(queued.Job):
    def perform(self, seconds=0.0):
        time.sleep(seconds)
        queued.get_redis().incr(DONE)


class MetricsBad(queued.Job):
    queued_options = {"retry": 0}  # straight to dead: one failure each, never run again

    def perform(self):
        raise RuntimeError("a failure the metrics count")
