"""Fake mode's jobs: one list per job class name, in push order (``HardWorker.jobs`` is the
live list), the buried jobs (``dead``), the expired ones, and which job a drain takes next.
Draining them through run.py is drain.py's (run.py puts a released or buried job back here).
"""
from __future__ import annotations

import threading
import time

from .. import client as _client
from ..periodic import declared as _declared
from ..periodic import message as _message
from ..periodic import stamp as _stamp
from ..jobregistry import registry
from ..payload import dumps, new_jid
from . import tasks

_lock = threading.RLock()
#: Job class name -> its pushed payloads (dicts), oldest first.
_jobs: dict[str, list[dict]] = {}
#: Jobs that buried themselves (``self.bury(reason)``), with error_class "Buried".
dead: list[dict] = []
#: Jobs not run because they were past their ``expires_at`` when drained or pushed inline.
expired: list[dict] = []


def jobs_of(name: str) -> list[dict]:
    """The live list of one class's jobs (made empty on first use)."""
    with _lock:
        return _jobs.setdefault(name, [])


def add(msg: dict) -> None:
    with _lock:
        _jobs.setdefault(msg["class"], []).append(msg)


def add_expired(msg: dict) -> None:
    with _lock:
        expired.append(msg)


def class_names() -> list[str]:
    """The class names a list is kept for (a push or a look at ``.jobs`` made it), oldest
    first."""
    return list(_jobs)


def jobs(queue: str | None = None) -> list[dict]:
    """Every job fake mode holds (of one queue, if given), class by class."""
    with _lock:
        return [m for listed in _jobs.values() for m in listed
                if queue is None or m.get("queue") == queue]


def clear(name: str) -> None:
    with _lock:
        jobs_of(name).clear()


def clear_all() -> None:
    """Forget every job, buried job and task held in memory."""
    with _lock:
        for listed in _jobs.values():
            listed.clear()
        dead.clear()
        expired.clear()
    tasks.clear_all()


def take(names: list[str], until: float | None, ran: set) -> dict | None:
    """Take the job pushed first (by created_at; list order within a class) among the first
    due one (by ``until``, if given) not run by this drain yet of each class, as a worker
    gets it: a scheduled one without ``at``, enqueued now."""
    with _lock:
        heads = []
        for name in names:
            listed = _jobs.get(name) or []
            for i, msg in enumerate(listed):
                at = msg.get("at")
                if msg.get("jid") in ran or (until is not None and at is not None
                                             and at > until):
                    continue
                heads.append((msg.get("created_at") or 0, len(heads), listed, i))
                break
        if not heads:
            return None
        _, _, listed, i = min(heads)
        msg = listed.pop(i)
    if msg.get("at") is not None:
        msg = {k: v for k, v in msg.items() if k != "at"}
        msg["enqueued_at"] = time.time()
    return msg


def tick(name: str, at: float | None = None) -> str | None:
    """Push what a tick of the ``@queued.periodic`` schedule ``name`` pushes (at ``at``, else
    at its latest tick), through the client middleware, into the fake or inline mode; its
    jid, or None if the schedule is disabled or a middleware cancelled it."""
    if _client.testing is None:
        raise RuntimeError("queued.testing.tick() pushes in fake or inline mode only "
                           "(in a daemon, the master pushes the ticks)")
    schedule = _declared.get(name)
    if schedule is None:
        known = ", ".join(sorted(_declared)) or "none"
        raise LookupError(f"no @queued.periodic schedule named {name!r} (declared: {known})")
    if not schedule.enabled:
        return None
    now = _client.clock()
    when = at if at is not None else schedule.timing.latest(now)
    template = _message(schedule, registry.lookup(schedule.klass))
    msg = _stamp(template, name, when, now, new_jid())
    client = _client.default_client()
    if not client.middleware.reaches_end(msg["class"], msg, msg["queue"]):
        return None
    msg["enqueued_at"] = now
    _client.testing.send(client, {msg["queue"]: [dumps(msg)]}, {})
    return msg["jid"]
