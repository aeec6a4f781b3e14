"""The master's per-class metrics plumbing, in one object so master.py only calls it: the shared
table (metrics.py, made before any fork), its flush to Redis on each heartbeat and at exit
(metricsflush.py) and the Prometheus exporter of ``metrics: HOST:PORT`` (promserve.py).

``record_metrics: false`` turns the recording off (no table, no flush: a worker then runs
without the few stores per job); the exporter still serves busy workers and memory.

A HUP applies both settings (``prepare`` then ``commit``; issue 16.1.11: they were logged as
applied and changed nothing). A new ``metrics:`` address is bound before the reload commits,
so an address that cannot be had refuses the whole reload and /metrics stays where it was.
``record_metrics`` turned on makes the table then (the workers forked from then on record into
it); turned off, the workers forked from then on record nothing, while the table stays and is
flushed and served, so the counts of the workers still running the old config are not lost.
"""
from __future__ import annotations

import logging
import time

from ..errors import ConfigError
from .metrics import MetricsTable, Recorder
from .metricsflush import Flusher
from .slots import SlotTable, slot_count

log = logging.getLogger("queued.master")


class JobMetrics:
    def __init__(self, config, r, keys, table: SlotTable):
        self.config = config
        self.r, self.keys, self.slots = r, keys, table
        self.recording = bool(getattr(config, "record_metrics", True))
        self.table: MetricsTable | None = None
        self.flusher: Flusher | None = None
        self.own: Recorder | None = None
        if self.recording:
            self._make_table()
        self.exporter = self._exporter(config) if config.metrics is not None else None

    def _make_table(self) -> None:
        """One region per worker slot (the rolling restart's spare included), and the
        master's own (the last)."""
        self.table = MetricsTable(slot_count(self.config.process_count) + 1)
        self.flusher = Flusher(self.r, self.keys, self.table)
        self.own = self.table.recorder(self.table.master_region)

    def _exporter(self, config):
        from .promserve import Exporter  # needs prometheus_client: only when asked for
        return Exporter(config, self.slots, self.table)

    @property
    def worker_table(self) -> MetricsTable | None:
        """What a worker forked now records into (None: it records nothing)."""
        return self.table if self.recording else None

    def start(self) -> None:
        """Before the workers: serve ``/metrics`` if configured (a ConfigError if it cannot)."""
        if self.exporter is not None:
            self.exporter.start()

    def recorder(self, slot: int, locked: bool = False, held: bool = False
                 ) -> Recorder | None:
        """A worker's handle on its slot's region; call it in the worker, after fork
        (MetricsTable.recorder says what ``locked`` and ``held`` are)."""
        return (self.table.recorder(slot, locked, held) if self.worker_table is not None
                else None)

    def in_child(self) -> None:
        if self.exporter is not None:
            self.exporter.close_in_child()

    def count_failure(self, job_class: str, queue: str) -> None:
        """A job the master failed itself (its worker died running it and it took the
        failure path): counted in the master's own region."""
        if self.own is not None and self.recording:
            self.own.record({"class": job_class}, queue, 0.0, True)

    def flush(self) -> None:
        """The differences since the last flush to Redis (Redis errors go to the caller; the
        counts then go out with the next flush)."""
        if self.flusher is not None:
            self.flusher.flush(time.time())

    def stop(self) -> None:
        if self.exporter is not None:
            self.exporter.stop()

    # --- HUP ------------------------------------------------------------------------------
    def prepare(self, config) -> "MetricsChange":
        """What ``config`` changes here, ready to commit or abort. A new /metrics address is
        bound now: a ConfigError (naming the key) if it cannot be, nothing changed."""
        change = MetricsChange(self, config)
        if config.metrics == self.config.metrics:
            return change
        if config.metrics is None:
            change.close_old = True
            return change
        new = self._exporter(config)
        if self.exporter is not None and self.exporter.port == new.port:
            # (the same port on another host: the old socket may hold it; let go first, and
            # take it back if the new one cannot be had)
            self.exporter.stop()
            try:
                new.bind()
            except ConfigError:
                self.exporter.start()
                raise
        else:
            new.bind()
        change.exporter, change.close_old = new, self.exporter is not None
        return change


class MetricsChange:
    """A HUP's metrics settings, prepared (jobmetrics.prepare): ``commit`` once the reload is
    sure, ``abort`` if it was refused after all (the new code did not load)."""

    def __init__(self, owner: JobMetrics, config):
        self.owner, self.config = owner, config
        self.exporter = None     # a new exporter, bound, not serving yet
        self.close_old = False   # the old exporter stops

    def commit(self) -> None:
        owner, config = self.owner, self.config
        record = bool(getattr(config, "record_metrics", True))
        owner.config = config
        if record and owner.table is None:
            owner._make_table()
        if record != owner.recording:
            log.info("record_metrics: %s for the workers forked from now on",
                     "on" if record else "off")
        owner.recording = record
        if self.close_old and owner.exporter is not None:
            owner.exporter.stop()
            log.info("metrics: /metrics at %s:%d closed", owner.exporter.host,
                     owner.exporter.port)
            owner.exporter = None
        if self.exporter is not None:
            owner.exporter, self.exporter = self.exporter, None
            owner.exporter.serve()
        if owner.exporter is not None and owner.table is not None:
            owner.exporter.collector.set_table(owner.table)

    def abort(self) -> None:
        if self.exporter is not None:
            self.exporter.stop()
            self.exporter = None
            owner = self.owner
            if owner.exporter is not None and owner.exporter.server is None:
                owner.exporter.start()  # (let go of for the same port: taken back)
