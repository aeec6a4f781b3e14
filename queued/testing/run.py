"""One job run in this process, as a worker runs it (server/runner.py), for the test modes:
its class found by name (ActiveJob's wrapped one too), the instance's jid, queue, msg and
task_id, the server middleware around ``perform``, an ``async def perform`` run to its end,
the hooks, and the job's state in its task. No timeout, no retry: the job's exception is
raised to the caller. A released job goes back on its class's list, a buried one to ``dead``.
A job past its ``expires_at`` is not run, as a worker drops it: it goes to ``expired``, its
class's ``on_expired`` hook is called and its task is told (a final error, class Expired).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
import time
from typing import Any

from .. import activejob, expiry, ops, tracking
from ..errors import JobFailed, UnknownJobClass
from ..jobregistry import registry
from ..middleware import server_middleware
from . import store, tasks

log = logging.getLogger("queued.testing")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def perform(msg: dict) -> bool:
    """Run one job; False when it was past its expires_at (not run)."""
    name, args, kwargs = msg["class"], msg.get("args") or [], {}
    if activejob.is_wrapped(msg):
        name, (args, kwargs) = activejob.job_name(msg), activejob.arguments(msg)
    cls = registry.lookup(name)
    if cls is None:
        raise UnknownJobClass(f"no job class named {name!r} is registered in this process")
    queue, task_id, jid = msg.get("queue", "default"), tracking.task_id_of(msg), msg["jid"]
    if expiry.EXPIRES_AT in msg and _expired(msg, cls, task_id, jid):
        return False
    job = cls()
    job.jid, job.queue, job.msg, job.task_id = jid, queue, msg, task_id
    tasks.move(task_id, jid, "working")
    saved = ops._sayer, ops._toucher
    ops.set_sayer(lambda text: tasks.say(task_id, jid, text))
    ops.set_toucher(lambda: True)
    try:
        server_middleware.invoke(job, msg, queue,
                                 lambda: complete(job.perform(*args, **kwargs)))
    except ops.Release as e:
        tasks.move(task_id, jid, "enqueued")
        store.add(_released(msg, e.delay))
    except ops.Bury as e:
        store.dead.append(_buried(msg, e.reason))
        tasks.move(task_id, jid, "error", _error("Buried", e.reason))
    except JobFailed as e:
        tasks.move(task_id, jid, "failed", _error("JobFailed", e.reason))
        raise
    except BaseException as e:
        tasks.move(task_id, jid, "error", _error(type(e).__name__, str(e)))
        _hook(job, "after_failed", e)
        raise
    else:
        tasks.move(task_id, jid, "finished")
        _hook(job, "after_succeeded")
    finally:
        ops.set_sayer(saved[0])
        ops.set_toucher(saved[1])
    return True


def _expired(msg: dict, cls: Any, task_id: str | None, jid: str) -> bool:
    """A job past its deadline, dropped as a worker drops it (server/guards.py: expire)."""
    now = time.time()
    at = expiry.expired(msg, now)
    if at is None:
        return False
    why = expiry.describe(at, now)
    log.info("expired: %s (jid %s): %s", msg["class"], jid, why)
    store.add_expired(msg)
    tasks.move(task_id, jid, "error", _error(expiry.ERROR_CLASS, why))
    try:
        expiry.hook(cls, msg)
    except Exception:  # noqa: BLE001 - as the worker: a broken hook is logged
        log.exception("on_expired hook raised")
    return True


def complete(result: Any) -> Any:
    """``perform``'s result; an ``async def perform``'s coroutine run to its end first, on
    an event loop of the test mode's own (in a thread of its own when the caller is inside
    an event loop already, as an async test is)."""
    if not inspect.iscoroutine(result):
        return result
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _own_loop().run_until_complete(result)
    with concurrent.futures.ThreadPoolExecutor(1, "queued-testing-async") as pool:
        return pool.submit(asyncio.run, result).result()


def _own_loop() -> asyncio.AbstractEventLoop:
    """One loop for the process's async jobs, as a worker has (an async client made by one
    job is still usable by the next)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
        return _loop


def _hook(job: Any, name: str, *args: Any) -> None:
    try:
        getattr(job, name)(*args)
    except Exception:  # noqa: BLE001 - as the worker: a broken hook does not fail the job
        log.exception("%s hook raised", name)


def _released(msg: dict, delay: float) -> dict:
    again = dict(msg)
    again[ops.RELEASES] = _count(msg.get(ops.RELEASES)) + 1
    now = time.time()
    if delay > 0:
        again.pop("enqueued_at", None)
        again["at"] = now + delay
    else:
        again["enqueued_at"] = now
    return again


def _buried(msg: dict, reason: str) -> dict:
    now = time.time()
    return {**msg, "error_class": "Buried", "error_message": reason, "failed_at": now,
            ops.BURIES: _count(msg.get(ops.BURIES)) + 1}


def _error(error_class: str, message: str) -> dict:
    return {"class": error_class, "message": message, "final": True, "at": time.time()}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
