"""``queued.Task``: many jobs under one id, and the fate of every one (seed 000).

The producer's side and the reader's::

    task = queued.Task("promo 42", on_complete=NotifyDone, on_success=NotifyOk)
    with task:                          # jobs pushed inside the block join the task,
        for p in products:              # written in bulk when it ends (none if it raises)
            Register.perform_async(p)
    queued.Task.find(task.id).progress()
    queued.Task.find(task.id).jobs("failed")

This module owns creating a task (its hash, its jobs' records, their ``enqueued`` state, the
index of tasks) and reading one. Every later move of a job between states is the daemon's, in
Lua (tracking.py, queued/lua/task.lua). A task completes when it is sealed and every job is in
a final state (finished, failed, or an error that will not be retried); the block that creates
a task seals it as it ends. To fill one in several blocks, use ``with task.batch():`` and then
``task.seal()``; a job adds to its own task with ``with self.task:`` (that block seals nothing,
and the task cannot complete before the adding job itself ends, so it never completes early).

Redis memory is bounded: every key of a task has a TTL from the moment it exists; a complete
task lives ``ttl_success`` (or ``ttl_failure`` if any job failed), one whose jobs stop moving
``ttl_idle`` after the last move (an abandoned task).

Inside a database transaction (queued.django), a task's writes wait for the commit as a push
does (none if it rolls back); its id is known at once. ``after_commit=False`` writes at once,
a database alias waits for that database's commit. The jobs of a block go with the task: a
push inside the block is handed to it at once, whatever the push's own ``after_commit``.
In queued.testing's fake and inline modes a task lives in memory (testing/tasks.py): every
method that reads or writes Redis hands over to it first.
"""
from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Iterator

from . import client as _client
from .keys import TASK_STATES, Keys
from .payload import dumps, new_jid
from .tracking import FINAL, TASK_PUSH, TASK_SEAL, CallbackBlocked, blocked_keys
from .unique import UNIQUE_PUSH

log = logging.getLogger("queued.task")

DAY = 24 * 3600
#: Jobs written per MULTI/EXEC when a block ends (each transaction is atomic: a worker never
#: sees a job of it before its record and its ``enqueued`` state).
CHUNK = 1000
#: The index of tasks (newest first) keeps this many, and none older than this (seconds).
INDEX_MAX, INDEX_AGE = 10_000, 90 * DAY
#: What progress() and a record call each state (the ``retry`` set is an error waiting for
#: its retry: shown as ``error``, with ``retrying``).
PUBLIC = {"enqueued": "enqueued", "working": "working", "finished": "finished",
          "failed": "failed", "retry": "error", "error": "error"}
# Stand-ins for what only the script that pushes a callback knows (tracking: task_callback).
_MARKS = ("\0queued:args\0", "\0queued:jid\0", "\0queued:created\0", "\0queued:enqueued\0")


class Task:
    """A task: create it with ``Task(...)``, reopen it with ``Task.find(id)``."""

    def __init__(self, description: str = "", *, on_complete: Any = None,
                 on_success: Any = None, callback_queue: str | None = None,
                 ttl_success: int = DAY, ttl_failure: int = 7 * DAY, ttl_idle: int = 30 * DAY,
                 client: _client.Client | None = None, after_commit: Any = None):
        for name, value in (("ttl_success", ttl_success), ("ttl_failure", ttl_failure),
                            ("ttl_idle", ttl_idle)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number of seconds >= 1, not {value!r}")
        self.client = client or _client.default_client()
        self.keys: Keys = self.client.keys
        self.id = new_jid()
        self.description = str(description)
        self.created_at: float | None = None
        self._meta = {"description": self.description, "ttl_success": ttl_success,
                      "ttl_failure": ttl_failure, "ttl_idle": ttl_idle, "sealed": "0"}
        for kind, cb in (("on_complete", on_complete), ("on_success", on_success)):
            if cb is not None:
                self._meta[kind] = _callback_pieces(self.client, cb, callback_queue)
        self._stored = False  # its hash is in Redis (made by its first block)
        self._seals = True    # its first `with` block seals it (not a reopened task's)
        self._pending: list[_Buffer] = []
        self._after_commit = after_commit  # (see Client.push: False, or a database alias)

    def __repr__(self) -> str:
        return f"<queued.Task {self.id} {self.description!r}>"

    # --- reopening -----------------------------------------------------------------------------
    @classmethod
    def find(cls, task_id: str, client: _client.Client | None = None) -> "Task | None":
        """The task with this id, or None if there is none (never made, or expired)."""
        client = client or _client.default_client()
        if _client.testing is not None:
            meta = _client.testing.task_meta(task_id)
        else:
            meta = {k.decode(): v.decode()
                    for k, v in client.redis.hgetall(client.keys.task(task_id)).items()}
        if not meta:
            return None
        task = cls.__new__(cls)
        task.client, task.keys, task.id = client, client.keys, task_id
        task._after_commit = None
        task._meta = meta
        task.description = task._meta.get("description", "")
        task.created_at = float(task._meta.get("created_at", 0)) or None
        task._stored, task._seals, task._pending = True, False, []
        return task

    # --- adding jobs ---------------------------------------------------------------------------
    def __enter__(self) -> "Task":
        self._open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        buffer = self._close()
        if exc_type is None:
            self._commit_then(partial(self._write, buffer, self._seals))
            self._seals = False  # (the block's write seals; a later block does not)

    @contextmanager
    def batch(self) -> Iterator["Task"]:
        """A block of jobs that joins the task without sealing it (``seal()`` when done)."""
        self._open()
        try:
            yield self
        except BaseException:
            self._close()
            raise
        self._commit_then(partial(self._write, self._close(), False))

    def create(self) -> "Task":
        """Store the task now, open (not sealed), with no job yet: jobs join it later, from
        Python in ``batch()`` blocks, from other languages with the payload field ``task_id``
        (docs/tasks.md); ``seal()`` when every job is in."""
        if not self._stored:
            self._commit_then(partial(self._write, _Buffer(self.id), False))
        return self

    def seal(self, total: int | None = None) -> None:
        """Every job is in: the task completes once they all are final (at once if they
        are). ``total``: the number of jobs the task will have, when some were pushed by
        another language's producer with only the ``task_id`` field (such a job is counted
        from its start; the task does not complete before it has ``total``). Sealing twice
        does nothing more (a later ``total`` replaces the earlier). Raises
        ``queued.tracking.CallbackBlocked`` (nothing written) if sealing would complete the
        task while a callback's queue key holds another Redis type."""
        if total is not None and (isinstance(total, bool) or not isinstance(total, int)
                                  or total < 0):
            raise ValueError(f"total must be a whole number >= 0, not {total!r}")
        self._commit_then(partial(self._seal, total))

    def _seal(self, total: int | None) -> None:
        if not self._stored:
            self._write(_Buffer(self.id), seal=False)
        if _client.testing is not None:
            _client.testing.seal_task(self.id, total)
        else:
            ks = self.keys.task_keys(self.id)
            sealed = int(TASK_SEAL(self.client.redis, [*ks, self.keys.queues],
                                   [self.id, self.keys.ns, "" if total is None else str(total)]))
            if sealed < 0:  # nothing written: it would complete into a broken callback queue
                raise CallbackBlocked(self.id, blocked_keys(self.client.redis, self.keys, self.id))
            if not sealed:
                raise LookupError(f"task {self.id} does not exist (expired or deleted)")
        self._seals = False

    def _commit_then(self, write: Callable[[], None]) -> None:
        """Run ``write`` now, or at the commit of the transaction open now (as a push)."""
        hook = _client.commit_hook
        if hook is None or self._after_commit is False or not hook(write, self._after_commit):
            write()

    def _open(self) -> None:
        buffer = _Buffer(self.id)
        buffer.token = _client.task_sink.set(buffer)
        self._pending.append(buffer)

    def _close(self) -> "_Buffer":
        buffer = self._pending.pop()
        _client.task_sink.reset(buffer.token)
        return buffer

    def _write(self, buffer: "_Buffer", seal: bool) -> None:
        """The block's jobs, CHUNK per transaction: each job's record, its ``enqueued`` state
        and the job itself together, so a worker never runs a job the task does not know."""
        if _client.testing is not None:
            try:  # (inline mode raises a job's error once every job ran: seal first anyway)
                _client.testing.write_task(self, buffer)
            finally:
                self._stored = True
                if seal:
                    self._seal(None)
            return
        r, ks = self.client.redis, self.keys.task_keys(self.id)
        ttl_ms = int(self._meta["ttl_idle"]) * 1000
        jobs = [job for job in buffer.jobs if job[0] not in buffer.locks]
        for start in range(0, max(len(jobs), 1), CHUNK):
            pipe = r.pipeline(transaction=True)
            if not self._stored:
                self._create(pipe)
            chunk = jobs[start:start + CHUNK]
            if chunk:
                _push_chunk(pipe, self.keys, ks, chunk)
            for key in (ks[0], ks[1], ks[7]):  # the hash, enqueued, records
                pipe.pexpire(key, ttl_ms)
            replies = pipe.execute()
            self._stored = True
            if chunk and replies[-4]:
                log.warning("task %s: %d job(s) not pushed: their jid is already in the task "
                            "(the same jid is the same job)", self.id, replies[-4])
        if buffer.locks:
            self._write_unique(buffer, ks, ttl_ms)
        if seal:
            self._seal(None)

    def _write_unique(self, buffer: "_Buffer", ks: list[str], ttl_ms: int) -> None:
        """The block's unique jobs, after the task exists: each pushed with its record and
        its enqueued state only if its lock was free (unique_push.lua), so a duplicate dropped
        at the push is not counted in the task. (The task may run its other jobs meanwhile:
        it completes only once sealed, after this.)"""
        jobs = [job for job in buffer.jobs if job[0] in buffer.locks]
        records = {jid: record for jid, record, *_ in jobs}
        for start in range(0, len(jobs), CHUNK):
            locked = [(*buffer.locks[jid][:1], text, at, buffer.locks[jid][1])
                      for jid, _record, _queue, at, text in jobs[start:start + CHUNK]]
            keys, args = _client.unique_push_call(self.keys, locked, (ks[7], ks[1]), ttl_ms,
                                                  records)
            UNIQUE_PUSH(self.client.redis, keys, args)

    def _create(self, pipe: Any) -> None:
        now = time.time()
        self.created_at = now
        pipe.hset(self.keys.task(self.id), mapping={**self._meta, "created_at": repr(now),
                                                    "touched_at": repr(now)})
        pipe.zadd(self.keys.tasks, {self.id: now})
        pipe.zremrangebyscore(self.keys.tasks, "-inf", now - INDEX_AGE)
        pipe.zremrangebyrank(self.keys.tasks, 0, -INDEX_MAX - 1)

    # --- reading ---------------------------------------------------------------------------------
    def progress(self) -> dict:
        """Counts per state in O(1): total, enqueued, working, finished, failed, error (of
        which ``retrying`` wait for a retry), and complete (sealed, every job final) and
        success (complete, every job finished)."""
        if _client.testing is not None:
            return _client.testing.task_progress(self.id)
        ks = self.keys.task_keys(self.id)
        pipe = self.client.redis.pipeline(transaction=False)
        pipe.hmget(ks[0], "sealed", "completed_at", "succeeded_at")
        for key in ks[1:7]:
            pipe.scard(key)
        (sealed, completed, succeeded), *counts = pipe.execute()
        c = dict(zip(TASK_STATES, counts))
        return {"total": sum(counts), "enqueued": c["enqueued"], "working": c["working"],
                "finished": c["finished"], "failed": c["failed"],
                "error": c["retry"] + c["error"], "retrying": c["retry"],
                "complete": completed is not None, "success": succeeded is not None,
                "sealed": sealed == b"1"}

    def info(self) -> dict:
        """The task itself: id, description, created_at, sealed, completed_at, succeeded_at,
        expected (the total announced by ``seal(total)``, else None)."""
        meta = (_client.testing.task_meta(self.id) if _client.testing is not None else
                {k.decode(): v.decode() for k, v in
                 self.client.redis.hgetall(self.keys.task(self.id)).items()})
        return {"id": self.id, "description": meta.get("description", ""),
                "created_at": _time(meta.get("created_at")), "sealed": meta.get("sealed") == "1",
                "completed_at": _time(meta.get("completed_at")),
                "succeeded_at": _time(meta.get("succeeded_at")),
                "expected": int(meta["expected"]) if meta.get("expected") else None,
                "exists": bool(meta)}

    def jobs(self, status: str | None = None, *, count: int = 500) -> Iterator[dict]:
        """Every job in ``status`` (enqueued, working, finished, failed, error; None: all),
        as records: jid, status, retrying, class, queue, args, error, messages. Read ``count``
        at a time."""
        cursor = 0
        for state in _states(status):
            while True:
                page, cursor = self._page(state, cursor, count)
                yield from page
                if not cursor:
                    break

    def page(self, state: str, cursor: int = 0, count: int = 50) -> tuple[list[dict], int]:
        """One page of the jobs in one state set (enqueued, working, finished, failed, retry:
        errors waiting for a retry, error: final errors), and the cursor of the next (0: no
        more). SSCAN: a job that moves meanwhile may be listed twice or missed, as with any
        scan; each record shows its state as read."""
        if state not in TASK_STATES:
            raise ValueError(f"unknown state {state!r}: one of {', '.join(TASK_STATES)}")
        return self._page(state, cursor, count)

    def _page(self, state: str, cursor: int, count: int) -> tuple[list[dict], int]:
        if _client.testing is not None:
            return _client.testing.task_page(self.id, state, cursor, count)
        ks = self.keys.task_keys(self.id)
        cursor, jids = self.client.redis.sscan(ks[1 + TASK_STATES.index(state)], cursor,
                                              count=count)
        return self._records([j.decode() for j in jids], state), int(cursor)

    def job(self, jid: str) -> dict | None:
        """One job's record, or None if it is not in this task."""
        if _client.testing is not None:
            return _client.testing.task_job(self.id, jid)
        ks = self.keys.task_keys(self.id)
        pipe = self.client.redis.pipeline(transaction=False)
        for key in ks[1:7]:
            pipe.sismember(key, jid)
        for state, member in zip(TASK_STATES, pipe.execute()):
            if member:
                return self._records([jid], state)[0]
        return None

    def _records(self, jids: list[str], state: str) -> list[dict]:
        if not jids:
            return []
        ks = self.keys.task_keys(self.id)
        pipe = self.client.redis.pipeline(transaction=False)
        pipe.hmget(ks[7], jids)
        pipe.hmget(ks[8], jids)
        pipe.hmget(ks[9], jids)
        records, errors, logs = pipe.execute()
        return [_record(jid, state, rec, err, lines)
                for jid, rec, err, lines in zip(jids, records, errors, logs)]

    def wait(self, timeout: float | None = None, interval: float = 0.2) -> dict:
        """Poll until the task is complete (or ``timeout`` seconds pass); its progress."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            progress = self.progress()
            if progress["complete"] or (deadline is not None and time.monotonic() >= deadline):
                return progress
            time.sleep(interval)


def recent(client: _client.Client | None = None, limit: int = 50) -> list[Task]:
    """The newest tasks that still exist, newest first."""
    client = client or _client.default_client()
    ids = (_client.testing.task_ids(limit) if _client.testing is not None else
           [i.decode() for i in client.redis.zrevrange(client.keys.tasks, 0, max(limit, 1) - 1)])
    found = [Task.find(i, client) for i in ids]
    return [t for t in found if t is not None]


def state_word(info: dict, progress: dict) -> str:
    """A task's state as people read it: succeeded, complete with failures, running (sealed,
    not complete) or open (not sealed)."""
    if progress["success"]:
        return "succeeded"
    if progress["complete"]:
        return "complete, with failures"
    return "running" if info["sealed"] else "open (not sealed)"


class _Buffer:
    """The jobs pushed in one open block (client.py hands them over: ``collect``)."""

    def __init__(self, task_id: str):
        self.id = task_id
        self.token: Any = None
        #: (jid, record JSON, queue or None when scheduled, at or None, payload JSON), in
        #: push order
        self.jobs: list[tuple[str, str, str | None, float | None, str]] = []
        #: jid -> (unique.Lock, queue) of the unique jobs among them (pushed with their lock)
        self.locks: dict[str, Any] = {}

    def collect(self, entries: list[tuple[str, str, str | None, float | None, str]],
                locks: dict[str, Any] | None = None) -> None:
        self.jobs.extend(entries)
        if locks:
            self.locks.update(locks)


def _push_chunk(pipe: Any, keys: Keys, ks: list[str], chunk: list) -> None:
    """One chunk's jobs, by TASK_PUSH (sent as EVAL: inside MULTI, an EVALSHA that Redis
    refused with NOSCRIPT would leave the rest of the transaction applied without it)."""
    queues: dict[str, int] = {}
    args: list = [len(chunk)]
    for jid, record, queue, at, text in chunk:
        where = 0 if queue is None else queues.setdefault(queue, len(queues) + 1)
        args += [jid, record, where, "" if at is None else repr(at), text]
    args += list(queues)
    pipe.execute_command(*TASK_PUSH.eval_command(
        [ks[7], ks[1], keys.queues, keys.schedule, *(keys.queue(q) for q in queues)], args))


def _callback_pieces(client: _client.Client, callback: Any, queue: str | None) -> str:
    """A callback's payload (a job class or a class name, pushed by the script that completes
    the task) as JSON pieces around its args, jid, created_at and enqueued_at."""
    msg = client.normalize({"class": callback, "args": []})
    if queue is not None:
        msg["queue"] = queue
    msg.pop("jid")
    msg.pop("created_at")
    msg["args"], msg["jid"], msg["created_at"], msg["enqueued_at"] = _MARKS
    text, pieces = dumps(msg), []
    for mark in _MARKS:
        head, found, text = text.partition(dumps(mark))
        if not found:
            raise ValueError(f"callback {callback!r}: its payload cannot be stored")
        pieces.append(head)
    pieces.append(text)
    return dumps([msg["queue"], *pieces])


def _states(status: str | None) -> list[str]:
    if status is None:
        return list(TASK_STATES)
    if status == "error":
        return ["retry", "error"]
    if status in TASK_STATES:
        return [status]
    raise ValueError(f"unknown job state {status!r}: one of enqueued, working, finished, "
                     f"failed, error (retry for the errors waiting for a retry)")


def _record(jid: str, state: str, rec: bytes | None, err: bytes | None,
            lines: bytes | None) -> dict:
    record = json.loads(rec) if rec else {}
    messages = []
    for line in (lines or b"").decode("utf-8", "replace").splitlines():
        at, text = json.loads(line)
        messages.append({"at": at, "text": text})
    return {"jid": jid, "status": PUBLIC[state], "retrying": state == "retry",
            "final": state in FINAL,
            # (ActiveJob's wrapped class, as Sidekiq shows it: issue 20)
            "class": record.get("wrapped") or record.get("class"), "queue": record.get("queue"),
            "args": record.get("args"), "at": record.get("at"),
            "error": json.loads(err) if err else None, "messages": messages}


def _time(value: str | None) -> float | None:
    return float(value) if value else None
