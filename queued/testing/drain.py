"""Fake mode's drains: the jobs store.py holds, run here in order through run.py (Sidekiq::
Testing's ``drain`` and ``drain_all``). ``HardWorker.drain()`` (job.py) and
``queued.testing.drain_all()`` call these.
"""
from __future__ import annotations

from . import run, store


def drain(name: str, until: float | None = None) -> int:
    """Run one class's jobs in order, those pushed meanwhile too, until none is left (with
    ``until``: none due by then); the number run. A job's exception is raised as it is (the
    job is off the list already). A job that released itself is not run again by this drain.
    A job past its ``expires_at`` is not run (nor counted): it goes to ``expired``."""
    return _drain(lambda: [name], until)


def drain_all(until: float | None = None) -> int:
    """Run every class's jobs, in the order they were pushed, those pushed meanwhile too,
    until none is left (with ``until``: none due by then); the number run."""
    return _drain(store.class_names, until)


def _drain(names, until: float | None) -> int:
    ran: set = set()
    count = 0
    while True:
        msg = store.take(names(), until, ran)
        if msg is None:
            return count
        ran.add(msg["jid"])
        if run.perform(msg):
            count += 1
