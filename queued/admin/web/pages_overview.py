"""Overview: the totals, a live graph of processed/failed per second (static/app.js polls
``/stats``), the last days' history and Redis's own numbers."""
from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .paging import int_param
from .render import render, web_of

#: The INFO fields shown (Sidekiq's dashboard shows the same few).
REDIS_INFO = ("redis_version", "uptime_in_days", "connected_clients", "used_memory_human",
              "used_memory_peak_human")


def overview(request: Request):
    web = web_of(request)
    days = int_param(request, "days", 7, 1, 180)
    info = web.r.info()
    return render(request, "overview.html", {
        "stats": web.admin.stats(), "history": web.admin.history(days), "days": days,
        "redis": {k: info.get(k, "") for k in REDIS_INFO},
        "interval": web.poll_interval})


def stats(request: Request):
    """The numbers the live graph polls (Sidekiq Web's /stats): totals, no per-queue list."""
    web = web_of(request)
    doc = web.admin.stats().as_dict()
    doc.pop("queues")
    doc["server_utc_time"] = time.strftime("%H:%M:%S UTC", time.gmtime())
    doc["time"] = time.time()
    return JSONResponse(doc, headers={"cache-control": "no-store"})


routes = [Route("/", overview, name="overview"), Route("/stats", stats, name="stats")]
