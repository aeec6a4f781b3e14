"""A job of a task that an operator removes (deleted from a queue or a set, cleared with it, or
killed to dead) will never run again, so its task is told: the job becomes a final ``error``
there, with its last error and how it was removed. Without this the task would wait for it for
ever (an enqueued or retrying job keeps a task from completing), or show a dead job as still
retrying.

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
from .snapshot import Snapshot

#: What a job of a task holds in its bytes (move.lua looks for the same).
MARKER = f'"{tracking.TASK_FIELD}"'.encode()

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


def mark_taken(r: redis_lib.Redis, keys: Keys, snap: Snapshot, source: str, where: str) -> int:
    """Mark the task jobs of a whole set or queue removed in one step (a clear, which took
    the key: Snapshot(take=True)). The jobs are read only when some task exists, so a Redis
    without tasks pays one EXISTS for it."""
    if not r.exists(keys.tasks):
        return 0
    marked = 0
    for rows in snap.pages(1000):
        raws = [row[0] if isinstance(row, tuple) else row for row in rows]
        entries = [Entry(raw, None, source) for raw in raws if MARKER in raw]
        if entries:
            marked += mark_removed(r, keys, entries, "delete", where)
    return marked
