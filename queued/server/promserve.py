"""``metrics: HOST:PORT``: the master serves Prometheus text at ``/metrics``.

What it serves is aggregated in the master from shared memory (metrics.py for the per-class
counters and durations, the slot table for busy workers and pids), at scrape time, by a custom
collector: no prometheus_client multiprocess mode, so no file per worker pid piling up as
workers are recycled. prometheus_client's WSGI app runs on wsgiref's server, in a daemon thread
of the master; it binds exactly the address configured, its socket is closed in every forked
worker, and it is shut down as the master stops. docs/metrics.md lists every metric and its Sidekiq
and Dramatiq equivalents.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psutil

from ..errors import ConfigError
from ..metricskeys import BUCKETS
from .metrics import BUCKET0, FAILED, MICROS, PROCESSED, MetricsTable
from .slots import SlotTable

log = logging.getLogger("queued.master")

#: The ``le`` bounds of the duration histograms (seconds): Sidekiq's buckets, so both views of
#: the same jobs agree. A time exactly on a bound counts in the next bucket (Sidekiq's rule).
LE = tuple(f"{b / 1000:g}" for b in BUCKETS[:-1]) + ("+Inf",)


def _require_client(config):
    """prometheus_client, or a ConfigError naming the key and the file."""
    try:
        import prometheus_client  # noqa: F401 - the metrics extra
        from prometheus_client import core
    except ImportError:
        raise ConfigError(f"{config.config_file or 'the configuration'}: metrics: serving "
                          "Prometheus needs the prometheus_client package, which is not "
                          "installed (pip install 'queued-jobs[metrics]'), or remove metrics:"
                          ) from None
    return core


class Collector:
    """Builds every family at each scrape from what the master's shared memory says now."""

    def __init__(self, core, table: SlotTable, metrics: MetricsTable | None, concurrency: int):
        self.core = core
        self.table = table
        self.reader = metrics.reader() if metrics is not None else None
        self.concurrency = concurrency

    def set_table(self, metrics: MetricsTable) -> None:
        """Read ``metrics`` from now on (record_metrics turned on by a HUP: jobmetrics.py)."""
        if self.reader is None or self.reader.table is not metrics:
            self.reader = metrics.reader()

    def collect(self) -> Iterator:
        yield from self._jobs()
        views = self.table.views()
        core = self.core
        busy = core.GaugeMetricFamily("queued_process_busy_workers", "Jobs this master's "
                                      "workers run now (a worker of many threads counts each).",
                                      value=sum(1 for v in views if v.busy))
        slots = core.GaugeMetricFamily("queued_process_workers", "Worker processes this "
                                       "master runs (its concurrency).",
                                       value=self.concurrency)
        rss = core.GaugeMetricFamily("queued_process_rss_bytes", "Resident memory of the master "
                                     "and of each worker.", labels=["slot"])
        for name, pid in [("master", os.getpid())] + [(str(v.slot), v.pid) for v in views
                                                       if v.pid and v.record == 0]:
            try:
                rss.add_metric([name], psutil.Process(pid).memory_info().rss)
            except psutil.Error:
                pass  # a worker that just exited
        yield from (busy, slots, rss)

    def _jobs(self) -> Iterator:
        core = self.core
        labels = ["class", "queue"]
        processed = core.CounterMetricFamily(
            "queued_jobs_processed", "Jobs that ended, failed ones included.", labels=labels)
        failed = core.CounterMetricFamily("queued_jobs_failed", "Jobs that failed.",
                                          labels=labels)
        durations = core.HistogramMetricFamily(
            "queued_job_duration_seconds", "Run time of the jobs that succeeded.",
            labels=labels)
        totals = self.reader.totals() if self.reader is not None else {}
        for (klass, queue), row in sorted(totals.items()):
            processed.add_metric([klass, queue], row[PROCESSED])
            failed.add_metric([klass, queue], row[FAILED])
            counts, running = [], 0
            for le, n in zip(LE, row[BUCKET0:]):
                running += n
                counts.append((le, running))
            durations.add_metric([klass, queue], counts, row[MICROS] / 1e6)
        yield from (processed, failed, durations)


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per request (a slow scraper holds up no other), never joined at exit."""
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - no line per scrape on stderr
        pass


def _make_server(host: str, port: int, app) -> WSGIServer:
    """A WSGI server bound to exactly ``host``:``port`` (IPv4 or IPv6, as the host
    resolves)."""
    family, *_, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                              flags=socket.AI_PASSIVE)[0]
    server_class = type("MetricsServer", (_Server,), {"address_family": family})
    return make_server(sockaddr[0], port, app, server_class=server_class, handler_class=_Quiet)


class Exporter:
    """``bind`` (the address is taken, or a ConfigError says why), then ``serve`` (a daemon
    thread answers). Two steps so a HUP that moves /metrics binds the new address before it
    commits to the reload, and the old one serves until then (jobmetrics.MetricsChange)."""

    def __init__(self, config, table: SlotTable, metrics: MetricsTable | None):
        self.config = config
        self.host, self.port = config.metrics
        self.core = _require_client(config)
        self.collector = Collector(self.core, table, metrics, config.concurrency)
        self.server = None
        self.thread = None

    def start(self) -> None:
        self.bind()
        self.serve()

    def bind(self) -> None:
        """Listen on HOST:PORT, or a ConfigError saying why not (a port taken, a host that is
        not this machine's)."""
        from prometheus_client import CollectorRegistry, make_wsgi_app
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        try:
            self.server = _make_server(self.host, self.port, make_wsgi_app(registry))
        except OSError as e:
            raise ConfigError(f"{self.config.config_file or 'the configuration'}: metrics: "
                              f"cannot listen on {self.host}:{self.port} ({e.strerror or e})"
                              ) from None

    def serve(self) -> None:
        self.thread = threading.Thread(target=self.server.serve_forever, name="metrics-http",
                                       daemon=True)
        self.thread.start()
        log.info("metrics: Prometheus at http://%s:%d/metrics",
                 f"[{self.host}]" if ":" in self.host else self.host, self.port)

    def close_in_child(self) -> None:
        """In a freshly forked worker: let go of the listening socket (the thread serving it
        was not forked), so the port is the master's alone and freed when it stops."""
        if self.server is not None:
            self.server.socket.close()

    def stop(self) -> None:
        if self.server is None:
            return
        if self.thread is not None:
            self.server.shutdown()
            self.thread.join(5)
        self.server.server_close()
        self.server = self.thread = None
