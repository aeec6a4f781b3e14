"""A job of a task that an operator removes (deleted from a queue or a set, or killed to dead)
will never run again, so its task is told: the job becomes a final ``error`` there, with its
last error and how it was removed. Without this the task would wait for it for ever (an
enqueued or retrying job keeps a task from completing), or show a dead job as still retrying.

Marked after the removal, by the same script a worker uses (tracking.TASK_MARK), only for the
jobs the removal took (a job a worker took meanwhile is its worker's to mark). A dead job that
is deleted is already final: its record keeps its real error.
"""
from __future__ import annotations

from typing import Iterable

import redis as redis_lib

from .. import tracking
from ..keys import Keys
from .entries import Entry

#: How the removal reads in the job's error, by action.
HOW = {"delete": "deleted by an operator", "dead": "killed by an operator (moved to dead)"}


def task_jobs(entries: Iterable[Entry]) -> list[tuple[Entry, str]]:
    """The entries that belong to a task, with its id."""
    found = []
    for entry in entries:
        msg = entry.msg
        tid = msg.get(tracking.TASK_FIELD) if isinstance(msg, dict) else None
        if isinstance(tid, str) and tid and entry.jid:
            found.append((entry, tid))
    return found


def mark_removed(r: redis_lib.Redis, keys: Keys, entries: Iterable[Entry], action: str,
                 where: str) -> int:
    """Mark each removed task job a final error in its task (one pipeline); how many."""
    jobs = task_jobs(entries)
    if not jobs:
        return 0
    r.script_load(tracking.TASK_MARK.source)  # (the pipeline below runs it by SHA)
    pipe = r.pipeline(transaction=False)
    for entry, tid in jobs:
        how = f"{HOW[action]} from {where}"
        message = f"{entry.error_message} ({how})" if entry.error_message else how
        err = tracking.error_json(entry.error_class or "Removed", message, final=True,
                                  retry_count=entry.retry_count)
        ks, args = tracking.mark_call(keys, tracking.Move(tid, entry.jid, "error", err))
        pipe.execute_command(*tracking.TASK_MARK.command(ks, args))
    return sum(int(x) for x in pipe.execute())
