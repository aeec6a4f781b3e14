"""Lifecycle events (Sidekiq's ``:startup``, ``:quiet``, ``:shutdown``, ``:heartbeat``, and
gunicorn's ``pre_fork``/``post_fork``): plain lists of callables, kept apart from middleware on
purpose.

    @queued.on("startup")
    def warm_up(): ...

    @queued.on("worker_start")
    def fresh_pool():
        engine.dispose(close=False)   # SQLAlchemy: the pool the master made is not ours

In the master: ``startup`` once Redis is reachable and before any worker is forked (it suits
enqueueing or checking things, not opening connections for workers: they fork later), ``quiet``,
``shutdown``, ``heartbeat``, and ``before_fork`` just before each worker is forked (close what
a child must not inherit: queued.django closes Django's database connections there).

In each worker: ``worker_start`` once, after the fork and before its first job, and
``thread_start`` in each thread that runs jobs, before its first job (a worker of one job at a
time fires it in its one thread, right after ``worker_start``). Anything that holds a socket
and was made in the master (a database pool, a gRPC channel, an error tracker's client) is
made again there: after fork the child holds copies of the master's sockets, and two processes
talking on one socket corrupt each other's conversations (issue 19).

A handler that raises is logged and skipped, wherever it runs.
"""
from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger("queued.events")

EVENTS = ("startup", "quiet", "shutdown", "heartbeat", "before_fork", "worker_start",
          "thread_start")
_handlers: dict[str, list[Callable[[], None]]] = {name: [] for name in EVENTS}


def on(event: str) -> Callable:
    if event not in _handlers:
        raise ValueError(f"unknown event {event!r}; known: {', '.join(EVENTS)}")

    def register(fn: Callable[[], None]) -> Callable[[], None]:
        _handlers[event].append(fn)
        return fn
    return register


def fire(event: str, handlers: dict | None = None) -> None:
    """Run the event's handlers (``handlers``: a snapshot's, see server/loader.py)."""
    for fn in list((_handlers if handlers is None else handlers)[event]):
        try:
            fn()
        except Exception:  # noqa: BLE001 - one broken hook must not stop the daemon
            log.exception("%s handler %s raised", event, getattr(fn, "__qualname__", fn))


#: Called as ``handler(exc, context)`` for every failed job (Sidekiq's error_handlers), e.g. to
#: report to an error tracker. ``context`` has the job payload, its queue and the outcome
#: ("retry", "dead" or "drop"). A handler that raises is logged and skipped.
error_handlers: list[Callable[[BaseException, dict], None]] = []


def report(exc: BaseException, context: dict, handlers: list | None = None) -> None:
    for handler in list(error_handlers if handlers is None else handlers):
        try:
            handler(exc, context)
        except Exception:  # noqa: BLE001
            log.exception("error handler %s raised", getattr(handler, "__qualname__", handler))


def snapshot() -> tuple:
    """Every handler, to be put back with ``restore`` (a HUP's reload of the job code)."""
    return {name: list(fns) for name, fns in _handlers.items()}, list(error_handlers)


def restore(state: tuple) -> None:
    handlers, errors = state
    for name, fns in handlers.items():
        _handlers[name][:] = fns
    error_handlers[:] = errors
