"""Task tracking, the Redis side: the scripts that move a task's jobs between states, and the
arguments every caller (the worker, the master, the producer, the operator's tools) gives them.

A job belongs to a task when its payload carries ``task_id`` (TASK_FIELD): a string any
producer can set, Ruby and PHP included; Sidekiq ignores the key, so a task's jobs stay valid
Sidekiq jobs. The states (keys.TASK_STATES) live in one set of jids each; queued/lua/task.lua
owns every move between them, with the completion check and the callbacks, and each script
that ends a reservation (fail.lua) or marks a job (task_mark.lua) runs it in the same step as
its own write, so a crash cannot leave the job ended and its state not moved, or the reverse.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, NamedTuple

from .connection import Script
from .errors import QueuedError
from .keys import TASK_STATES, Keys
from .payload import dumps

#: The payload key that binds a job to a task (its value: the task's id).
TASK_FIELD = "task_id"
#: States in which a job of a task is done with (the task completes when all its jobs are).
FINAL = frozenset({"finished", "failed", "error"})
#: A job's message log in its task is cut at this many bytes (Job.say).
SAY_CAP = 16 * 1024
SAY_DROPPED = dumps([0, "(later messages were dropped: this job's log is full)"]) + "\n"

_LUA = os.path.join(os.path.dirname(__file__), "lua")
with open(os.path.join(_LUA, "task.lua"), "rb") as _f:
    LIBRARY = _f.read() + b"\n"

TASK_MARK = Script(_LUA, "task_mark", prelude=LIBRARY)
TASK_SEAL = Script(_LUA, "task_seal", prelude=LIBRARY)
TASK_SAY = Script(_LUA, "task_say")
TASK_PUSH = Script(_LUA, "task_push")  # (task.py: a producer's block)

assert TASK_STATES == ("enqueued", "working", "finished", "failed", "retry", "error")


def task_id_of(msg: dict) -> str | None:
    """The task a job belongs to, or None (absent, or not a usable id)."""
    value = msg.get(TASK_FIELD)
    return value if isinstance(value, str) and value and len(value) <= 200 else None


class Move(NamedTuple):
    """A job's move to a state, for the script that ends its run (fail.lua) or marks it."""
    task_id: str
    jid: str
    state: str
    error: str = ""   # JSON (error_json) or ""

    def keys(self, keys: Keys) -> list[str]:
        return keys.task_keys(self.task_id)

    def args(self, keys: Keys) -> list[str]:
        """fail.lua's task arguments, after its own: jid, state, error, task id, prefix."""
        return [self.jid, self.state, self.error, self.task_id, keys.ns]


def error_json(error_class: str, message: str, *, final: bool, retry_count: int | None = None,
               now: float | None = None) -> str:
    """A job's last error as its task keeps it."""
    error: dict[str, Any] = {"class": error_class, "message": message, "final": final,
                             "at": time.time() if now is None else now}
    if retry_count is not None:
        error["retry_count"] = retry_count
    return dumps(error)


def failure(task_id: str | None, failed: dict, final: bool,
            exc: BaseException) -> Move | None:
    """A failed job's move in its task: an error waiting for its retry, or a final one, with
    the error as the failure path wrote it into the payload (error_class, error_message,
    retry_count), else as ``exc`` says (a ``retry: false`` job is dropped unchanged). None
    for a job outside a task."""
    if task_id is None:
        return None
    err = error_json(str(failed.get("error_class") or type(exc).__name__),
                     str(failed.get("error_message") or exc),
                     final=final, retry_count=failed.get("retry_count"))
    return Move(task_id, str(failed["jid"]), "error" if final else "retry", err)


def record_json(msg: dict, queue: str) -> str:
    """A job's record in its task: what it is (its state and errors are kept apart)."""
    record = {"class": msg.get("class"), "queue": queue, "args": msg.get("args")}
    if msg.get("wrapped"):
        record["wrapped"] = msg["wrapped"]
    return dumps(record)


def mark_call(keys: Keys, move: Move, record: str = "") -> tuple[list, list]:
    """KEYS and ARGV of TASK_MARK: move a job outside the end of a run (working as it starts,
    retry when its worker was killed, an operator's error). ``record`` is written if the job
    has none. The script returns 0 if the task is gone."""
    return ([*move.keys(keys), keys.queues],
            [move.task_id, move.jid, move.state, move.error, record, keys.ns])


class CallbackBlocked(QueuedError):
    """A move (or a seal) that would complete a task was refused, nothing written: the queue
    key of a callback it would push holds another Redis type (task.lua: task_blocked). Fix
    the key and do it again; the callback is pushed then."""

    def __init__(self, task_id: str, keys: list[str]):
        where = ", ".join(keys) or "a callback's queue key"
        super().__init__(f"task {task_id} would complete now, but {where} holds another Redis "
                         f"type (WRONGTYPE): nothing was written; fix the key and try again")
        self.task_id, self.keys = task_id, keys


def blocked_keys(redis: Any, keys: Keys, task_id: str) -> list[str]:
    """The keys a task's callbacks would be pushed into that hold another Redis type (for a
    refusal's message: read after it, not atomically)."""
    found = []
    for stored in redis.hmget(keys.task(task_id), "on_complete", "on_success"):
        if stored:
            key = keys.queue(json.loads(stored)[0])
            if redis.type(key) not in (b"none", b"list") and key not in found:
                found.append(key)
    if redis.type(keys.queues) not in (b"none", b"set"):
        found.append(keys.queues)
    return found


def mark(redis: Any, keys: Keys, move: Move, record: str = "") -> bool:
    """Run TASK_MARK; False if the task is gone. CallbackBlocked if refused (see there)."""
    written = int(TASK_MARK(redis, *mark_call(keys, move, record)))
    if written < 0:
        raise CallbackBlocked(move.task_id, blocked_keys(redis, keys, move.task_id))
    return bool(written)


def say_call(keys: Keys, task_id: str, jid: str, text: str,
             now: float | None = None) -> tuple[list, list]:
    """KEYS and ARGV of TASK_SAY: one time-stamped line for a job's message log. The script
    returns 1 written, 0 task gone, -1 log full."""
    ks = keys.task_keys(task_id)
    line = dumps([round(time.time() if now is None else now, 6), text]) + "\n"
    return [ks[0], ks[-1]], [jid, line, SAY_CAP, SAY_DROPPED]
