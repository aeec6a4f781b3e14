"""Metrics: per job class, processed, failed, total and mean time over ``?period=1h..72h``
(``&substr=`` narrows the classes), and a class's page: its counts over time and its
execution-time histogram, from the keys Sidekiq 7+ writes (queued/admin/metrics.py)."""
from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from ..metrics import LABELS, MINUTE_TTL_HOURS, parse_period
from . import charts
from .filters import named
from .render import path_param, render, search_text, web_of

PERIODS = (1, 2, 4, 8, 24, 48, 72)


def job_metrics(request: Request):
    web = web_of(request)
    hours = parse_period(request.query_params.get("period"))
    substr = search_text(request.query_params.get("substr", ""))
    period = web.metrics.top(hours, substr=substr or None)
    return render(request, "job_metrics.html", {"period": period, "hours": hours,
                                                "periods": PERIODS, "substr": named(substr) if substr else ""})


def job_class(request: Request):
    web = web_of(request)
    klass = path_param(request, "klass")
    hours = parse_period(request.query_params.get("period"))
    series = web.metrics.series(klass, hours)
    counts = web.metrics.histogram(klass, hours)
    totals = {"processed": sum(m.processed for _, m in series),
              "failed": sum(m.failed for _, m in series), "ms": sum(m.ms for _, m in series)}
    ok = totals["processed"] - totals["failed"]
    totals["mean_ms"] = totals["ms"] / ok if ok > 0 else 0.0
    step = int(series[1][0] - series[0][0]) if len(series) > 1 else 60  # (the reader's)
    return render(request, "job_class.html", {
        "klass": klass, "hours": hours, "periods": PERIODS, "step": step,
        "processed_chart": charts.time_bars(series, step),
        "histogram_chart": charts.histogram(list(LABELS), counts),
        "hist_hours": min(hours, MINUTE_TTL_HOURS), "totals": totals})


routes = [Route("/job-metrics", job_metrics, name="job_metrics"),
          Route("/job-metrics/{klass:queued_name}", job_class, name="job_class")]
