"""What an operator does to a task from the dashboard's task page: see its callbacks (which job
class each pushes, to which queue, under which jid, and whether it was pushed), retry its
errors now (its jobs waiting in the retry set and those dead), and delete it.

- Retrying its errors acts on the jobs where they are (queued.api's bulk retry, the jobs of
  the task picked by their ``task_id``), so each is moved once, and a job a worker or the
  scheduler took meanwhile is not touched. Both sets are copied in one step before either is
  walked (jobsets.act_together): a job retried from ``retry`` whose run ends in ``dead`` at
  once (bury, a poison pill) was retried again from there, one click running it twice (red
  team RT1, finding 1). The question counts the task's jobs in those copies (``count``), not
  its records: an error an operator deleted is final in the task but nowhere to retry
  (finding 10). A ``failed`` job (``queued.JobFailed``) is not among them: a business
  failure is never retried, and its payload is not kept.
- Deleting a task removes its keys (the hash, its state sets, its records, errors and message
  logs) and its place in the index, in one transaction. Its jobs still waiting run as any
  job, outside a task (task.lua writes nothing for a task that is gone), and no callback is
  pushed.
"""
from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass

from ..task import Task
from .api import Admin
from .entries import Filter
from .jobsets import act_together
from .names import to_key
from .snapshot import together

#: The callbacks a task may have, and the field of its hash that says it was pushed.
KINDS = (("on_complete", "complete", "completed_at"), ("on_success", "success", "succeeded_at"))


@dataclass
class Callback:
    kind: str               # on_complete, on_success
    klass: str
    queue: str
    jid: str                # the jid task.lua gives it (one per task and kind)
    pushed_at: float | None


def callbacks(task: Task) -> list[Callback]:
    """The task's callbacks, as its hash stores them (task.py: the payload in pieces around
    what only the completing script knows)."""
    r, key = task.client.redis, task.keys.task(task.id)
    fields = [k for kind, _, mark in KINDS for k in (kind, mark)]
    values = dict(zip(fields, r.hmget(key, fields)))
    found = []
    for kind, word, mark in KINDS:
        stored = values[kind]
        if not stored:
            continue
        klass, queue = _class_and_queue(stored)
        jid = hashlib.sha1(to_key(f"{task.id}:{word}")).hexdigest()[:24]
        at = values[mark]
        found.append(Callback(kind, klass, queue, jid, float(at) if at else None))
    return found


def _class_and_queue(stored: bytes) -> tuple[str, str]:
    """The class and queue of a stored callback: [queue, text before the args, before the
    jid, before created_at, before enqueued_at, after], made whole with stand-ins."""
    try:
        pieces = json.loads(stored)
        queue, parts = str(pieces[0]), [str(p) for p in pieces[1:6]]
        msg = json.loads(parts[0] + "[]" + parts[1] + '""' + parts[2] + "0" + parts[3] + "0"
                         + parts[4])
        return str(msg.get("class", "?")), queue
    except (ValueError, TypeError, IndexError, AttributeError):
        return "?", "?"


def count(admin: Admin, task: Task) -> dict:
    """What "Retry its errors now" would retry: ``{"count", "retry", "dead", "token"}``, the
    task's jobs in copies of ``retry`` and ``dead`` taken in one step and kept (HELD_TTL) for
    the action that answers the question (``retry_errors(..., token)``)."""
    where = Filter.of(task=task.id)
    token = secrets.token_hex(12)
    snaps = [js.snapshot(held=True, where=where, token=f"{token}-{name}")
             for name, js in (("retry", admin.retries), ("dead", admin.dead))]
    with together(snaps):
        retry, dead = (js.count_in(snap, where)
                       for js, snap in zip((admin.retries, admin.dead), snaps))
    return {"count": retry + dead, "retry": retry, "dead": dead, "token": token}


def retry_errors(admin: Admin, task: Task, token: str | None = None) -> tuple[int, int]:
    """Push the task's errors to their queues now: (from the retry set, from dead). Each job
    in either set when it begins (``token``: when ``count`` counted them) is retried once at
    most. snapshot.Gone when the question's copies are gone."""
    where, sets = Filter.of(task=task.id), [admin.retries, admin.dead]
    if token is None:
        waiting, dead = act_together("retry", sets, where)
        return waiting, dead
    snaps = [js.resume(f"{token}-{name}", where) for name, js in zip(("retry", "dead"), sets)]
    with snaps[0], snaps[1]:
        waiting, dead = act_together("retry", sets, where, snapshots=snaps)
    return waiting, dead


def delete_task(task: Task) -> bool:
    """Remove the task's keys and its place in the index; False if it was gone already."""
    r, keys = task.client.redis, task.keys
    pipe = r.pipeline(transaction=True)
    pipe.exists(keys.task(task.id))
    pipe.unlink(*keys.task_keys(task.id))
    pipe.zrem(keys.tasks, task.id)
    return bool(pipe.execute()[0])
