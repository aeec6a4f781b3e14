"""Lifecycle events (Sidekiq's ``:startup``, ``:quiet``, ``:shutdown``, ``:heartbeat``): plain
lists of callables the master runs, kept apart from middleware on purpose.

    @queued.on("startup")
    def warm_up(): ...

``startup`` runs in the master once Redis is reachable and before any worker is forked, so
it suits enqueueing or checking things, not opening connections for workers (they fork later
and make their own). A handler that raises is logged and skipped.
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


def fire(event: str) -> None:
    for fn in list(_handlers[event]):
        try:
            fn()
        except Exception:  # noqa: BLE001 - one broken hook must not stop the daemon
            log.exception("%s handler %s raised", event, getattr(fn, "__qualname__", fn))


#: Called as ``handler(exc, context)`` for every failed job (Sidekiq's error_handlers), e.g. to
#: report to an error tracker. ``context`` has the job payload, its queue and the outcome
#: ("retry", "dead" or "drop"). A handler that raises is logged and skipped.
error_handlers: list[Callable[[BaseException, dict], None]] = []


def report(exc: BaseException, context: dict) -> None:
    for handler in list(error_handlers):
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
