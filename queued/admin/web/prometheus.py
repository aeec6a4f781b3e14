"""``/metrics`` of the dashboard: cluster-wide gauges in Prometheus's text format, read from Redis
at each scrape by a custom collector (prometheus_client's exposition, its own registry: none of
the web process's own metrics). Named as the Sidekiq exporters name theirs, with ``queued_``.

Bounded: one pipeline for the totals and one for the queues (two commands per queue), however
many jobs there are; the number of queues is the only thing that grows the scrape. Documented
one by one in docs/dashboard.md.
"""
from __future__ import annotations

import time

import redis as redis_lib
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ..api import Admin
from .filters import visible


class ClusterCollector:
    def __init__(self, admin: Admin):
        self.admin = admin

    def describe(self):
        return []  # read at scrape time only; nothing to read at registration

    def collect(self):
        started = time.monotonic()
        s = self.admin.stats()
        queues = self.admin.queue_summaries()
        yield CounterMetricFamily("queued_processed_jobs", "Jobs processed, all time "
                                  "(stat:processed, as Sidekiq counts them).", s.processed)
        yield CounterMetricFamily("queued_failed_jobs", "Jobs failed, all time (stat:failed).",
                                  s.failed)
        for name, doc, value in (
                ("queued_enqueued_jobs", "Jobs waiting in every queue.", s.enqueued),
                ("queued_scheduled_jobs", "Jobs in the schedule set.", s.scheduled_size),
                ("queued_retry_jobs", "Jobs in the retry set.", s.retry_size),
                ("queued_dead_jobs", "Jobs in the dead set.", s.dead_size),
                ("queued_processes", "Live processes (queued's and Sidekiq's).",
                 s.processes_size),
                ("queued_busy_workers", "Jobs running now, every process.", s.workers_size),
                ("queued_default_queue_latency_seconds",
                 "Age of the oldest job of the default queue.", s.default_queue_latency),
                ("queued_queues", "Queues known (in the queues set, or paused).", len(queues))):
            yield GaugeMetricFamily(name, doc, value=value)
        size = GaugeMetricFamily("queued_queue_enqueued_jobs", "Jobs waiting in a queue.",
                                 labels=["queue"])
        latency = GaugeMetricFamily("queued_queue_latency_seconds",
                                    "Age of a queue's oldest job.", labels=["queue"])
        paused = GaugeMetricFamily("queued_queue_paused", "1 when a queue is paused.",
                                   labels=["queue"])
        for q in queues:
            label = visible(q.name)  # (a name that is not UTF-8: its bytes as \xff)
            size.add_metric([label], q.size)
            latency.add_metric([label], q.latency)
            paused.add_metric([label], 1 if q.paused else 0)
        yield from (size, latency, paused)
        yield from self._issue21()
        yield GaugeMetricFamily("queued_scrape_duration_seconds",
                                "Time this scrape took to read Redis.",
                                value=time.monotonic() - started)


    def _issue21(self):
        """queued's own counts (expired, over limit, duplicates), and each rate limiter's
        size, use and counts (limits.SHOWN at most, the most recently used)."""
        c = self.admin.counters()
        for name, doc in (("expired", "Jobs dropped unrun past their expires_at."),
                          ("overlimit", "Jobs rescheduled after OverLimit."),
                          ("unique_dropped", "Duplicate pushes of unique jobs dropped."),
                          ("unique_deferred", "Unique jobs put off as they started: another "
                           "copy held the lock.")):
            yield CounterMetricFamily(f"queued_{name}_jobs", doc, c[name])
        gauges = {"size": GaugeMetricFamily("queued_limiter_size", "A limiter's size.",
                                            labels=["limiter", "kind"]),
                  "in_use": GaugeMetricFamily("queued_limiter_in_use", "Units in use now (a "
                                              "leaky bucket's level).",
                                              labels=["limiter", "kind"])}
        counters = {k: CounterMetricFamily(f"queued_limiter_{k}", doc, labels=["limiter"])
                    for k, doc in (("held", "Units granted at once."),
                                   ("waited", "Units granted after a wait."),
                                   ("overlimit", "OverLimit raised: no unit within "
                                    "wait_timeout."),
                                   ("rescheduled", "Jobs rescheduled after OverLimit."))}
        for info in self.admin.limits.all():
            label = visible(info.name)  # (a name that is not UTF-8: its bytes as \xff)
            gauges["size"].add_metric([label, info.kind], info.size)
            gauges["in_use"].add_metric([label, info.kind], info.in_use)
            for k, family in counters.items():
                family.add_metric([label], info.counts.get(k, 0))
        yield from gauges.values()
        yield from counters.values()


def exposition(admin: Admin) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(admin))
    return generate_latest(registry)


async def metrics(request: Request):
    admin = request.app.state.web.admin
    try:
        body = await run_in_threadpool(exposition, admin)
    except redis_lib.RedisError as e:
        # A failed scrape, said so (Prometheus records `up` 0 for a non-200 answer).
        return PlainTextResponse(f"Redis is unreachable: {' '.join(str(e).split())}\n", 503)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


metrics_route = Route("/metrics", metrics, name="prometheus")
