"""Where a job is now, by its jid: a queue (and its place in it), the schedule, the retry or dead
set, running in a process (which one, its pid and worker, as its log lines name them), held by
a worker that fetched it, and its task's record. The answer ``queuedctl find`` prints
(DESIGN.md "On-call commands") and the dashboard can link to.

Everywhere, each place read the cheap way: a queue inside Redis a chunk at a time
(admin/lua/find_in_list.lua), the sorted sets by ZSCAN narrowed to members holding the jid as a
JSON string (once per way encoders spell it: PHP writes ``ab\\/cd``), running jobs from the
processes' ``<identity>:workers`` hashes, fetched ones from each master's reserved sets and
landing lists (``queued:masters`` names them), tasks by one pipeline over the index. Every
candidate is checked by its parsed jid (the text may be in another job's args), and the work
is one read of each place whatever is typed: a short or mistyped jid is looked for as the
whole jid it is, never as a part of one (red team RT1, findings 3 and 8).
A job moves while it is looked for: it may be seen in two places, or in none for a moment.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from .. import client as client_mod
from ..connection import Script
from ..task import Task
from ..tracking import task_id_of
from .api import Admin
from .entries import Entry, glob_escape, jid_spellings
from .names import ExactKeys, name_of, to_key

FIND_IN_LIST = Script(os.path.join(os.path.dirname(__file__), "lua"), "find_in_list")

#: Queue elements read per script call (one call holds Redis for about a millisecond).
LIST_CHUNK = 10_000
#: Set members Redis examines per ZSCAN call.
SCAN_COUNT = 5_000
#: Where a job can be, in the order they are listed.
PLACES = ("queue", "schedule", "retry", "dead", "running", "reserved", "task")


@dataclass
class Place:
    """One place a job is: ``where`` (one of PLACES), the job as stored there (``entry``;
    None for a task's record), and what that place says about it."""
    where: str
    entry: Entry | None = None
    queue: str | None = None
    position: int | None = None       # queue: 1 is the next to run
    length: int | None = None         # queue: its length then
    at: float | None = None           # when it runs, retries, died, started
    identity: str | None = None       # running, reserved: the process
    pid: int | None = None
    worker: str | None = None
    task_id: str | None = None        # task: its id, description and the job's record there
    task_description: str | None = None
    record: dict | None = field(default=None)

    def as_dict(self) -> dict[str, Any]:
        doc = {k: v for k, v in self.__dict__.items() if k != "entry" and v is not None}
        if self.entry is not None:
            doc["job"] = self.entry.as_dict()
        return doc


def locate(admin: Admin, jid: str, now: float | None = None) -> list[Place]:
    """Every place ``jid`` is found now, in PLACES order; [] when it is nowhere."""
    now = time.time() if now is None else now
    places = [*_in_queues(admin, jid), *_in_sets(admin, jid),
              *_running(admin, jid, now)]
    places += _reserved(admin, jid, {p.identity for p in places if p.where == "running"})
    places += _in_tasks(admin, jid, places)
    return places


# --- queues ---------------------------------------------------------------------------------------

def _in_queues(admin: Admin, jid: str) -> list[Place]:
    names = {name_of(n) for n in admin.r.sscan_iter(admin.keys.queues)} | set(admin.paused())
    found = []
    for name in sorted(names):
        hit = _in_list(admin, to_key(admin.keys.queue(name)), jid, f"queue:{name}")
        if hit is not None:
            entry, index, length = hit
            found.append(Place("queue", entry, queue=name, position=length - index,
                               length=length, at=entry.enqueued_at))
    return found


def _in_list(admin: Admin, key: bytes, jid: str, source: str) -> tuple[Entry, int, int] | None:
    """(the job nearest the head, its index from the head, the list's length) or None."""
    start, spellings = 0, jid_spellings(jid)
    while start >= 0:
        reply = FIND_IN_LIST(admin.r, [key], [to_key(jid), start, LIST_CHUNK, *spellings])
        start, length = int(reply[0]), int(reply[1])
        for i in range(2, len(reply), 2):
            entry = Entry(reply[i + 1], None, source)
            if entry.jid == jid:
                return entry, int(reply[i]), length
    return None


# --- the sorted sets ------------------------------------------------------------------------------

def _in_sets(admin: Admin, jid: str) -> list[Place]:
    found = []
    for where, jobset in (("schedule", admin.scheduled), ("retry", admin.retries),
                          ("dead", admin.dead)):
        for entry in _zscan_jid(admin, jobset.key, jid, jobset.name):
            found.append(Place(where, entry, queue=entry.queue, at=entry.score))
    return found


def _zscan_jid(admin: Admin, key: str, jid: str, source: str) -> list[Entry]:
    """The members whose jid is ``jid``: a ZSCAN MATCH pass per spelling (one for a jid
    every encoder writes alike), each member once."""
    found: dict[bytes, Entry] = {}
    for spelling in jid_spellings(jid):
        pattern = b"*" + glob_escape(spelling) + b"*"
        cursor = 0
        while True:
            cursor, rows = admin.r.zscan(key, cursor, match=pattern, count=SCAN_COUNT)
            for member, score in rows:
                entry = Entry(member, score, source)
                if member not in found and entry.jid == jid:
                    found[member] = entry
            if cursor == 0:
                break
    return sorted(found.values(), key=lambda e: e.score or 0.0)


# --- processes ------------------------------------------------------------------------------------

def _running(admin: Admin, jid: str, now: float) -> list[Place]:
    return [Place("running", r.entry, queue=r.queue, at=r.run_at, identity=r.identity,
                  pid=r.pid, worker=r.worker)
            for r in admin.running(now) if r.entry.jid == jid]


def _reserved(admin: Admin, jid: str, running_on: set[str | None]) -> list[Place]:
    """Fetched by a worker of a queued master and not (or no longer) running: waiting in its
    batch, or its end not written yet. Not repeated for a job its process shows running."""
    keys, found = admin.keys, []
    where: list[tuple[str, int, str | None]] = []  # (identity, slot, queue of a landing list)
    pipe = admin.r.pipeline(transaction=False)
    for identity, slots, queues in _masters(admin):
        for slot in range(slots):
            pipe.zrange(to_key(keys.reserved(identity, slot)), 0, -1)
            where.append((identity, slot, None))
            for queue in queues:
                pipe.lrange(to_key(keys.landing(identity, slot, queue)), 0, -1)
                where.append((identity, slot, queue))
    spellings = jid_spellings(jid)
    for (identity, slot, landing), members in zip(where, pipe.execute() if where else []):
        if identity in running_on:
            continue
        for member in members:
            if not any(spelling in member for spelling in spellings):
                continue
            queue, raw = landing, member
            if landing is None:  # a reserved member: queue NUL token NUL payload
                queue, _token, raw = member.split(b"\0", 2)
                queue = name_of(queue)
            entry = Entry(raw, None, f"queue:{queue}")
            if entry.jid == jid:
                found.append(Place("reserved", entry, queue=queue, identity=identity,
                                   worker=f"w{slot}"))
    return found


def _masters(admin: Admin) -> list[tuple[str, int, list[str]]]:
    out = []
    for identity, value in admin.r.hgetall(admin.keys.masters).items():
        try:
            desc = json.loads(value)
            out.append((name_of(identity), int(desc["slots"]),
                        [str(q) for q in desc["queues"]]))
        except (ValueError, KeyError, TypeError):
            continue  # (an unreadable registration: recovery.py logs it)
    return sorted(out)


# --- tasks ----------------------------------------------------------------------------------------

def _in_tasks(admin: Admin, jid: str, places: list[Place]) -> list[Place]:
    """The job's record in its task: the task its payload names, else (a job that ended and
    left every set) the task among the index's whose records hold the jid."""
    named = {task_id_of(p.entry.msg) for p in places if p.entry is not None and p.entry.msg}
    ids = sorted(i for i in named if i) or _tasks_holding(admin, jid)
    client = client_mod.Client(admin.r, namespace=admin.keys.ns[:-1] or None)
    client.keys = ExactKeys(admin.keys.ns[:-1] or None)  # (a task id that is not UTF-8)
    found = []
    for task_id in ids:
        task = Task.find(task_id, client)
        record = task.job(jid) if task is not None else None
        if record is not None:
            found.append(Place("task", None, task_id=task_id,
                               task_description=task.description, record=record))
    return found


def _tasks_holding(admin: Admin, jid: str) -> list[str]:
    ids = [name_of(i) for i in admin.r.zrange(admin.keys.tasks, 0, -1)]
    if not ids:
        return []
    pipe = admin.r.pipeline(transaction=False)
    for task_id in ids:
        pipe.hexists(to_key(admin.keys.task_keys(task_id)[7]), to_key(jid))  # jid -> record
    return [task_id for task_id, held in zip(ids, pipe.execute()) if held]
