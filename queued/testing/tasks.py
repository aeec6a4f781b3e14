"""Tasks in the test modes (``queued.Task`` hands its Redis side over to these): each task's
hash, its jobs' states, records, errors and messages, in memory; and what task.lua does when a
job ends: a sealed task whose jobs are all final is complete, and its callbacks are pushed,
once each, through the mode (fake: onto their class's list; inline: run at once).
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any

from ..keys import TASK_STATES
from ..payload import dumps
from ..task import _record
from ..tracking import FINAL

_lock = threading.RLock()
_tasks: dict[str, "_Task"] = {}


class _Task:
    def __init__(self, meta: dict[str, str], client: Any):
        self.meta = meta        # as the task's hash in Redis holds it (str -> str)
        self.client = client
        self.state: dict[str, str] = {}       # jid -> one of TASK_STATES
        self.records: dict[str, str] = {}     # jid -> record JSON
        self.errors: dict[str, str] = {}      # jid -> error JSON
        self.messages: dict[str, list[str]] = {}

    def counts(self) -> dict[str, int]:
        found = dict.fromkeys(TASK_STATES, 0)
        for state in self.state.values():
            found[state] += 1
        return found


def meta(task_id: str) -> dict[str, str]:
    with _lock:
        task = _tasks.get(task_id)
        return dict(task.meta) if task else {}


def write(task: Any, buffer: Any, mode: Any) -> None:
    """A block's jobs: their records and ``enqueued`` states first, then the jobs go through
    the mode (as task.py's MULTI writes records before a worker can see a job)."""
    now = time.time()
    with _lock:
        held = _tasks.get(task.id)
        if held is None:
            held = _tasks[task.id] = _Task({**task._meta, "created_at": repr(now)}, task.client)
        for jid, record, *_ in buffer.jobs:
            held.records[jid] = record
            held.state[jid] = "enqueued"
    queued: dict[str, list[str]] = {}
    scheduled: dict[str, float] = {}
    for _jid, _record_json, queue, at, text in buffer.jobs:
        if queue is None:
            scheduled[text] = at
        else:
            queued.setdefault(queue, []).append(text)
    if queued or scheduled:
        mode.send(task.client, queued, scheduled)


def seal(task_id: str, total: int | None, mode: Any) -> None:
    with _lock:
        held = _tasks.get(task_id)
        if held is None:
            raise LookupError(f"task {task_id} does not exist")
        held.meta["sealed"] = "1"
        if total is not None:
            held.meta["expected"] = str(total)
    settle(task_id, mode)


def move(task_id: str | None, jid: str, state: str, error: dict | None = None) -> None:
    """A job of a task changed state (run.py); a final one may complete the task."""
    if task_id is None:
        return
    with _lock:
        held = _tasks.get(task_id)
        if held is None:
            return  # (a job naming a task this process never made: nothing to keep)
        held.state[jid] = state
        if error is not None:
            held.errors[jid] = dumps(error)
    if state in FINAL:
        from ..client import testing as mode  # the mode in force now pushes the callbacks
        if mode is not None:
            settle(task_id, mode)


def say(task_id: str | None, jid: str, text: str) -> None:
    with _lock:
        held = _tasks.get(task_id) if task_id else None
        if held is not None:
            held.messages.setdefault(jid, []).append(dumps([round(time.time(), 6), text]))


def settle(task_id: str, mode: Any) -> None:
    """task.lua's task_settle: complete once sealed and every job final; each callback once."""
    pushes = []
    with _lock:
        held = _tasks[task_id]
        c = held.counts()
        total = sum(c.values())
        expected = held.meta.get("expected")
        if held.meta.get("sealed") != "1" or c["enqueued"] + c["working"] + c["retry"] > 0 \
                or (expected and total < int(expected)):
            return
        success = c["failed"] + c["error"] == 0
        summary = {"task_id": task_id, "description": held.meta.get("description", ""),
                   "total": total, "finished": c["finished"], "failed": c["failed"],
                   "error": c["error"], "complete": True, "success": success}
        now = repr(time.time())
        for kind, mark, field in (("complete", "completed_at", "on_complete"),
                                  ("success", "succeeded_at", "on_success")):
            if (kind == "complete" or success) and mark not in held.meta:
                held.meta[mark] = now
                if field in held.meta:
                    pushes.append(_callback(held.meta[field], kind, task_id, summary, now))
    for queue, payload in pushes:
        mode.send(held.client, {queue: [payload]}, {})


def _callback(stored: str, kind: str, task_id: str, summary: dict, now: str) -> tuple[str, str]:
    """task.lua's task_callback: the stored payload pieces around args, jid and times."""
    p = json.loads(stored)
    jid = hashlib.sha1(f"{task_id}:{kind}".encode()).hexdigest()[:24]
    return p[0], f'{p[1]}{dumps([task_id, summary])}{p[2]}"{jid}"{p[3]}{now}{p[4]}{now}{p[5]}'


def progress(task_id: str) -> dict:
    with _lock:
        held = _tasks.get(task_id)
        c = held.counts() if held else dict.fromkeys(TASK_STATES, 0)
        m = held.meta if held else {}
        return {"total": sum(c.values()), "enqueued": c["enqueued"], "working": c["working"],
                "finished": c["finished"], "failed": c["failed"],
                "error": c["retry"] + c["error"], "retrying": c["retry"],
                "complete": "completed_at" in m, "success": "succeeded_at" in m,
                "sealed": m.get("sealed") == "1"}


def page(task_id: str, state: str) -> tuple[list[dict], int]:
    """Every job of one state set, in one page (cursor 0: no more)."""
    with _lock:
        held = _tasks.get(task_id)
        jids = [j for j, s in held.state.items() if s == state] if held else []
        return [_as_record(held, jid) for jid in jids], 0


def job(task_id: str, jid: str) -> dict | None:
    with _lock:
        held = _tasks.get(task_id)
        return _as_record(held, jid) if held and jid in held.state else None


def _as_record(held: _Task, jid: str) -> dict:
    err = held.errors.get(jid)
    lines = "\n".join(held.messages.get(jid, []))
    return _record(jid, held.state[jid], held.records[jid].encode(),
                   err.encode() if err else None, lines.encode())


def ids(limit: int) -> list[str]:
    """The newest tasks' ids, newest first."""
    with _lock:
        return list(reversed(list(_tasks)))[:max(limit, 1)]


def clear_all() -> None:
    with _lock:
        _tasks.clear()
