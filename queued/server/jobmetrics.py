"""The master's per-class metrics plumbing, in one object so master.py only calls it: the shared
table (metrics.py, made before any fork), its flush to Redis on each heartbeat and at exit
(metricsflush.py) and the Prometheus exporter of ``metrics: HOST:PORT`` (promserve.py).

``record_metrics: false`` turns the recording off (no table, no flush: a worker then runs
without the few stores per job); the exporter still serves busy workers and memory.
"""
from __future__ import annotations

import time

from .metrics import MetricsTable, Recorder
from .metricsflush import Flusher
from .slots import SlotTable, slot_count


class JobMetrics:
    def __init__(self, config, r, keys, table: SlotTable):
        record = getattr(config, "record_metrics", True)
        #: one region per worker slot (the rolling restart's spare included), and the
        #: master's own (the last)
        self.table = MetricsTable(slot_count(config.process_count) + 1) if record else None
        self.flusher = Flusher(r, keys, self.table) if record else None
        self.own: Recorder | None = (self.table.recorder(self.table.master_region)
                                     if record else None)
        self.exporter = None
        if config.metrics is not None:
            from .promserve import Exporter  # needs prometheus_client: only when asked for
            self.exporter = Exporter(config, table, self.table)

    def start(self) -> None:
        """Before the workers: serve ``/metrics`` if configured (a ConfigError if it cannot)."""
        if self.exporter is not None:
            self.exporter.start()

    def recorder(self, slot: int, locked: bool = False) -> Recorder | None:
        """A worker's handle on its slot's region; call it in the worker, after fork."""
        return self.table.recorder(slot, locked) if self.table is not None else None

    def in_child(self) -> None:
        if self.exporter is not None:
            self.exporter.close_in_child()

    def count_failure(self, job_class: str, queue: str) -> None:
        """A job the master failed itself (its worker died running it and it took the
        failure path): counted in the master's own region."""
        if self.own is not None:
            self.own.record({"class": job_class}, queue, 0.0, True)

    def flush(self) -> None:
        """The differences since the last flush to Redis (Redis errors go to the caller; the
        counts then go out with the next flush)."""
        if self.flusher is not None:
            self.flusher.flush(time.time())

    def stop(self) -> None:
        if self.exporter is not None:
            self.exporter.stop()
