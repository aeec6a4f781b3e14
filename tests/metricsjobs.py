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


WHERE = "t:metrics-where"  # hash pid -> JSON {"regions": [...], "master": n}


class MetricsWhere(queued.Job):
    """Says which regions of the metrics table the worker running it has a recorder on (its
    own, and the master's, inherited at fork): two writers share a region when they are the
    same one."""

    def perform(self):
        import gc
        import json
        import os
        from queued.server.metrics import Recorder
        recorders = [o for o in gc.get_objects() if isinstance(o, Recorder)]
        queued.get_redis().hset(WHERE, str(os.getpid()), json.dumps({
            "regions": sorted({rec.region for rec in recorders}),
            "master": recorders[0].table.master_region}))
