"""Where a job thread's time limit may land: only in the job's own code (issue 17).

In a worker of many jobs at once a job thread gets its JobTimeout from the worker's watchdog
thread (PyThreadState_SetAsyncExc: server/timeout.py), which CPython raises at whatever bytecode
that thread runs next. Landing anywhere was a hang: raised in logging's ``Handler.acquire``
right after its lock was taken, it left the lock held for ever, and every thread of the
process stopped at its next log line, the watchdog's own reports among them (the red team's
rt2 finding 2). A lock taken by a ``with`` statement is released whatever lands inside it; a
lock taken by ``acquire()`` before a ``try`` is not, and neither is a connection a pool handed
out before its caller's ``try``.

So code that must not be cut in the middle is a guarded section: a job thread inside one gets
no JobTimeout; one that falls due meanwhile waits until the thread is out (the watchdog tries
again at its next tick) or is raised at the entry of the next guarded section, where nothing is
held yet. The sections are logging's locks (``guard_logging``: a handler's, from acquire to
release, and the module's), every command of queued's own Redis clients that job code reaches
(``guard_client``: ``get_redis()``'s, the one ``say()`` and ``touch()`` use), and any
``with OUTSIDE_JOB:`` block.

A thread is guarded only once it is registered with the object that keeps its count
(``register``: a job lane's LaneTimer in server/timeout.py, by pool.py); any other thread (a
thread the job starts itself, the watchdog, the main thread) passes through at the cost of one
dict lookup. A worker of one job at a time installs none of this: its ``threads: 1`` path
stays as it was. (SIGALRM, the limit of a job alone in a main thread, can land in a logging
lock too; it is not guarded yet.)

Does not own the time limit (server/timeout.py) nor when it is checked (server/watchdog.py).
"""
from __future__ import annotations

import logging
import time
from threading import get_ident
from typing import Any, Protocol


class Guard(Protocol):
    """What a guarded thread registers: ``enter`` may raise the time limit that fell due (at a
    section's entry nothing is held yet); ``leave`` never raises."""

    waiting: tuple | None  # (lock, its name, since) while the thread waits for a guarded lock

    def enter(self) -> None: ...

    def leave(self) -> None: ...


#: thread ident -> its guard (job threads of a worker of many jobs at once; see the header)
_guards: dict[int, Guard] = {}


def register(guard: Guard | None) -> None:
    """Guard the calling thread with ``guard`` (None: no longer)."""
    if guard is None:
        _guards.pop(get_ident(), None)
    else:
        _guards[get_ident()] = guard


def guard_of(ident: int) -> Guard | None:
    return _guards.get(ident)


class _Outside:
    """``with OUTSIDE_JOB:``: a guarded section (stateless, so one object serves every
    thread and nesting)."""

    def __enter__(self) -> None:
        guard = _guards.get(get_ident())
        if guard is not None:
            guard.enter()

    def __exit__(self, *exc: Any) -> bool:
        guard = _guards.get(get_ident())
        if guard is not None:
            guard.leave()
        return False


OUTSIDE_JOB = _Outside()


# --- logging's locks ----------------------------------------------------------------------------

_installed = False


def guard_logging() -> None:
    """Make every logging handler's lock (acquire to release) and logging's module lock guarded
    sections, and note which lane waits for one (``Guard.waiting``, what the watchdog reports
    when a lock stays held). Patches ``logging.Handler`` and ``logging._acquireLock``, so
    handlers made later are covered too; once per process."""
    global _installed
    if _installed:
        return
    _installed = True
    plain_acquire, plain_release = logging.Handler.acquire, logging.Handler.release

    def acquire(self: logging.Handler) -> None:
        guard = _guards.get(get_ident())
        if guard is None or not self.lock:
            plain_acquire(self)
            return
        guard.enter()
        _take(self.lock, guard, self)

    def release(self: logging.Handler) -> None:
        plain_release(self)
        guard = _guards.get(get_ident())
        if guard is not None and self.lock:
            guard.leave()

    logging.Handler.acquire, logging.Handler.release = acquire, release  # type: ignore
    module_acquire = getattr(logging, "_acquireLock", None)
    module_release = getattr(logging, "_releaseLock", None)
    if module_acquire is None or module_release is None:  # (3.13: ``with _lock`` throughout)
        return

    def acquire_module() -> None:
        guard = _guards.get(get_ident())
        lock = getattr(logging, "_lock", None)
        if guard is None or not lock:
            module_acquire()
            return
        guard.enter()
        _take(lock, guard, "logging's module lock")

    def release_module() -> None:
        module_release()
        guard = _guards.get(get_ident())
        if guard is not None and getattr(logging, "_lock", None):
            guard.leave()

    logging._acquireLock, logging._releaseLock = acquire_module, release_module  # type: ignore


def _take(lock: Any, guard: Guard, what: Any) -> None:
    """Acquire ``lock`` (of handler ``what``, or named ``what``) for a guarded thread; while it
    waits, the guard says for which lock, its name and since when (an uncontended acquire costs
    no more than before)."""
    if lock.acquire(False):
        return
    label = what if isinstance(what, str) else f"logging's lock (its {type(what).__name__})"
    guard.waiting = (lock, label, time.monotonic())
    try:
        lock.acquire()
    finally:
        guard.waiting = None


def owner_of(lock: Any) -> int | None:
    """The thread ident holding an RLock (CPython's repr says ``owner=<ident>``), or None."""
    text = repr(lock)
    at = text.find("owner=")
    if at < 0:
        return None
    digits = text[at + 6:].split(" ", 1)[0]
    return int(digits) if digits.isdigit() and digits != "0" else None


# --- queued's own Redis clients -------------------------------------------------------------------

def guard_client(r: Any) -> Any:
    """Make every command of redis-py client ``r`` (and of its pipelines) a guarded section: a
    JobTimeout landing between a pool handing out a connection and its caller's ``try`` would
    leak that connection. Returns ``r``."""
    if getattr(r, "_queued_guarded", False):
        return r
    command, make_pipeline = getattr(r, "execute_command", None), getattr(r, "pipeline", None)
    if command is None or make_pipeline is None:  # (an application's client of another kind)
        return r

    def execute_command(*args: Any, **options: Any) -> Any:
        with OUTSIDE_JOB:
            return command(*args, **options)

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = make_pipeline(*args, **kwargs)
        for name in ("execute", "immediate_execute_command", "reset"):
            setattr(pipe, name, _guarded(getattr(pipe, name)))
        return pipe

    try:
        r.execute_command, r.pipeline, r._queued_guarded = execute_command, pipeline, True
    except (AttributeError, TypeError):  # (one whose attributes are fixed: left as it is)
        pass
    return r


def _guarded(fn: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        with OUTSIDE_JOB:
            return fn(*args, **kwargs)
    return call
