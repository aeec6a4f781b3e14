"""The app factory: ``create_app(redis)`` is the ASGI app (Starlette), ``create_wsgi_app`` the
same app for a WSGI host (Django, Flask) through a2wsgi.

Page handlers are plain functions run in Starlette's thread pool (redis-py is blocking); the
POST handlers read their form asynchronously, check its CSRF token, then act in the pool.
"""
from __future__ import annotations

import os
import secrets
from typing import Any, Iterable

import redis as redis_lib
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from ...client import Client
from ...connection import make_redis
from ...keys import Keys
from ..api import Admin
from ..deadlimits import DeadLimits
from ..metrics import MetricsReader
from ..names import ExactKeys
from . import (pages_busy, pages_cron, pages_find, pages_jobs, pages_limits, pages_metrics,
               pages_overview, pages_queues, pages_tasks)
from .flash import Flash
from .frame import Footer, nav, redis_location
from .prometheus import metrics_route
from .render import Web, render
from ..hosts import LOOPBACK, AllowedHosts
from .security import BasicAuth, Csrf, CsrfCookie, HostCheck, SecurityHeaders

HERE = os.path.dirname(os.path.abspath(__file__))


def create_app(redis: redis_lib.Redis | str | None = None, *, namespace: str | None = None,
               secret_key: str | bytes | None = None, auth: str | None = None,
               poll_interval: float = 2.0, debug: bool = False,
               allowed_hosts: Iterable[str] | None = None,
               dead_limits: DeadLimits | None = None) -> Starlette:
    """The dashboard as an ASGI app. ``redis``: a redis-py client (bytes responses) or a URL
    (else ``$REDIS_URL``, else redis://127.0.0.1:6379/0). ``secret_key`` signs the CSRF
    tokens (else ``$QUEUED_WEB_SECRET``, else a random one per process: give one when several
    processes serve the app). ``auth``: ``"user:password"`` for HTTP basic auth.
    ``allowed_hosts``: the names (``NAME`` on any port, ``NAME:PORT``) requests may give in
    ``Host``; the rest are refused (DNS rebinding). Default: the loopback names; mounted in
    a site, give the site's names, or ``["*"]`` when the site checks Host itself.
    ``dead_limits``: dead's bounds for a kill when no live daemon publishes its own."""
    if redis is None or isinstance(redis, str):
        url = redis or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        redis = make_redis(url, socket_timeout=5.0, name="queued-web")
    secret = secret_key or os.environ.get("QUEUED_WEB_SECRET") or secrets.token_bytes(32)
    keys = Keys(namespace)
    hosts = AllowedHosts(LOOPBACK if allowed_hosts is None else allowed_hosts)
    web = Web(r=redis, keys=keys, admin=Admin(redis, namespace=namespace,
                                              dead_limits=dead_limits),
              client=_task_reader(redis, namespace), metrics=MetricsReader(redis, keys),
              csrf=Csrf(secret), flash=Flash(secret),
              footer=Footer(redis_location(redis), namespace), poll_interval=poll_interval)
    # /{set} (scheduled, retries, dead) last: it would match any other one-segment path
    routes = [*pages_overview.routes, *pages_busy.routes, *pages_queues.routes,
              *pages_tasks.routes, *pages_cron.routes, *pages_find.routes, *pages_metrics.routes,
              *pages_limits.routes, metrics_route,
              Mount("/static", app=StaticFiles(directory=os.path.join(HERE, "static")),
                    name="static"), *pages_jobs.routes]
    app = Starlette(debug=debug, routes=routes, exception_handlers={
        HTTPException: _http_error, redis_lib.ConnectionError: _redis_down,
        redis_lib.TimeoutError: _redis_down, redis_lib.ResponseError: _redis_refused})
    web.nav = nav(routes)
    app.state.web = web
    app.add_middleware(CsrfCookie)
    app.add_middleware(SecurityHeaders)
    if auth:
        app.add_middleware(BasicAuth, credentials=auth)
    app.add_middleware(HostCheck, allowed=hosts)  # the last added runs first: before all
    return app


def _task_reader(redis: redis_lib.Redis, namespace: str | None) -> Client:
    """The client the task pages read tasks through: its task keys are bytes, so a task id
    that is not UTF-8 still reads its own keys (names.ExactKeys)."""
    client = Client(redis, namespace=namespace)
    client.keys = ExactKeys(namespace)
    return client


def create_wsgi_app(redis: redis_lib.Redis | str | None = None, **options: Any):
    """The same app for a WSGI server or framework (a2wsgi runs the ASGI app in a loop of
    its own)."""
    from a2wsgi import ASGIMiddleware
    return ASGIMiddleware(create_app(redis, **options))


async def _http_error(request: Request, exc: HTTPException):
    if "text/html" not in request.headers.get("accept", ""):
        return PlainTextResponse(f"{exc.detail}\n", exc.status_code)
    return await _error_page(request, exc.status_code, exc.detail)


async def _redis_refused(request: Request, exc: Exception):
    """A key of another type than Sidekiq's (``retry`` set to a string): said, not a
    traceback."""
    text = f"Redis refused: {' '.join(str(exc).split())}"
    if "text/html" not in request.headers.get("accept", ""):
        return PlainTextResponse(text + "\n", 500)
    return await _error_page(request, 500, text)


async def _redis_down(request: Request, exc: Exception):
    text = f"Redis is unreachable: {' '.join(str(exc).split())}"
    if "text/html" not in request.headers.get("accept", ""):
        return PlainTextResponse(text + "\n", 503)
    return await _error_page(request, 503, text)


async def _error_page(request: Request, status: int, detail: str):
    # (in the thread pool, as every page: the stats bar reads Redis)
    return await run_in_threadpool(render, request, "error.html",
                                   {"status": status, "detail": detail}, status)
