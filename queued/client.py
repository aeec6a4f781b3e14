"""Pushing jobs: Sidekiq::Client 6.4's normalize_item/push/push_bulk, byte for byte.

This module owns what a producer writes (SIDEKIQ_FORMAT.md sections 2-3): ``SADD queues`` +
``LPUSH queue:<q>`` in one non-transactional pipeline, or ``ZADD schedule`` for a future ``at``
(member without ``at`` and without ``enqueued_at``). Payload keys come in the order Sidekiq
writes them: ``retry, queue, <class payload options>, <the item's own keys>, jid, created_at,
enqueued_at``. It also owns the process-wide default client, which producers and job code
share with the daemon (``configure()``/``default_client()``/``get_redis()``).

Departures from Sidekiq, on purpose: ``push`` with an ``at`` that is not in the future goes
straight to the queue (Sidekiq's Client.push would ZADD it for the poller; perform_in already
does this); a middleware that does not call ``call_next()`` cancels the push whatever it
returns; ``push_bulk`` groups jobs by queue if a middleware moved some, and writes at most
``batch_size`` jobs per command.

Speed (docs/benchmarks.md has the figures): a redis-py client's pushes go out on connections the
Client keeps for itself (made from its pool's settings, one per thread pushing at the same
time), packed into one write whose replies are all read back: the same bytes and the same
single round trip as a non-transactional redis-py pipeline, without the pool's checkout and the
pipeline's bookkeeping, which cost about as much as the round trip itself on a loopback Redis.
Any other client object (a cluster client, a test double) gets ``pipeline(transaction=False)``.
And ``push_bulk`` without client middleware encodes a batch's shared payload once and splices
each job's args and jid into it (``Client._push_alike``).
"""
from __future__ import annotations

import asyncio
import os
import select
import threading
import time
import weakref
from collections.abc import Mapping
from contextvars import ContextVar
from functools import partial
from typing import Any, Callable, Iterable

import redis as redis_lib
from redis.exceptions import ReadOnlyError, ResponseError

from . import expiry, sentinel, unique
from .connection import client_from_url, pack_commands
from .keys import Keys
from .middleware import Chain, client_middleware
from .arguments import check_args
from .payload import dumps, new_jid
from .tracking import TASK_FIELD

#: The task whose ``with`` block is open in this context (task.py): a push inside it carries
#: the task's id and is handed to the task (``collect``), which writes every job of the block
#: with its record, in bulk, when the block ends.
task_sink: ContextVar[Any] = ContextVar("queued_task_sink", default=None)

#: The clock every push reads (created_at, enqueued_at, at <= now). Tests may replace it.
clock = time.time

# Hooks that change what a push does. Both None unless an application turns them on, and a
# push then pays one comparison each for them (docs/benchmarks.md: no measurable cost).
#: ``commit_hook(run, using) -> bool``, set by queued.django (django/commit.py): True when it
#: deferred ``run`` (the rest of the push: client middleware, then the write) to the commit of
#: the transaction open on database ``using`` (None: Django's default database), False when
#: no transaction is open and the push goes on now.
commit_hook: Callable[[Callable[[], Any], Any], bool] | None = None
#: queued.testing's fake or inline mode (testing/modes.py): takes what a push would write to
#: Redis (``send``), and a task's writes (task.py), so no Redis is touched.
testing: Any = None

DEFAULT_URL = "redis://127.0.0.1:6379/0"
BULK_BATCH = 1000
# Stand-ins for a bulk batch's args and jid while its shared payload text is encoded
# (Client._push_alike); NUL is escaped in JSON, so no real key or value encodes the same.
_ARGS_MARK = "\0queued:args\0"
_JID_MARK = "\0queued:jid\0"
_RETRYABLE = ("READONLY", "NOREPLICAS", "UNBLOCKED")  # Sidekiq reconnects once on these
#: What _write returns when no job was dropped as a duplicate (no set made per push).
_NONE_DROPPED: frozenset = frozenset()


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _rb_falsy(v: Any) -> bool:
    """Ruby truthiness: only nil and false are false (0 and "" are true)."""
    return v is None or v is False


def _class_defaults(klass: Any) -> tuple[str, dict[str, Any]]:
    """(name, default payload keys) for ``class``: a name uses Sidekiq's default options (the
    class need not exist here, as in Ruby); a Job class (or @job function) its own options."""
    if isinstance(klass, str):
        if not klass:
            raise ValueError('job "class" must not be empty')
        return klass, {"retry": True, "queue": "default"}
    klass = getattr(klass, "job_class", klass)
    if isinstance(klass, type) and hasattr(klass, "payload_defaults"):
        if not klass.queued_name:
            raise ValueError(f"{klass.__qualname__} is abstract and cannot be pushed")
        return klass.queued_name, klass.payload_defaults()
    raise ValueError(f'job "class" must be a queued.Job subclass or a class name, not {klass!r}')


class Client:
    """Pushes Sidekiq payloads through one redis-py client (bytes responses)."""

    def __init__(self, redis: redis_lib.Redis | None = None, *, url: str | None = None,
                 namespace: str | None = None):
        #: Made here from a URL (so ours to replace in a worker: dedicate_job_connection).
        self.owns_redis = redis is None
        self.url = None  # the URL it was made from (get_async_redis makes its twin from it)
        if redis is None:
            self.url = url or os.environ.get("REDIS_URL") or DEFAULT_URL
            redis = client_from_url(self.url)
        self.redis = redis
        self.namespace = namespace
        self.keys = Keys(namespace)
        #: The chain every push runs through; replace it for a client of your own.
        self.middleware: Chain = client_middleware
        pool = getattr(redis, "connection_pool", None)
        #: Push on connections of our own (see the module header) when redis is redis-py's.
        self._direct = (isinstance(redis, redis_lib.Redis)
                        and isinstance(getattr(pool, "connection_kwargs", None), dict)
                        and callable(getattr(pool, "connection_class", None)))
        self._idle: list = []  # our connections not in use right now (list ops are atomic)
        _clients.add(self)

    def __repr__(self) -> str:
        return f"<queued.Client {self.redis!r} namespace={self.namespace!r}>"

    # --- building payloads ---
    def normalize(self, item: Mapping) -> dict:
        """Sidekiq's validate + normalize_item + verify_json: a new dict, the caller's item
        untouched; arguments JSON would change are refused (see ``strict_args``)."""
        msg = self._normalize(item)
        check_args(msg)
        return msg

    def _normalize(self, item: Mapping) -> dict:
        if not isinstance(item, Mapping) or "class" not in item or "args" not in item:
            raise ValueError(f'a job must be a dict with "class" and "args" keys: {item!r}')
        bad = [k for k in item if not isinstance(k, str)]
        if bad:
            raise ValueError(f"job keys must be strings, not {bad[0]!r}")
        if not isinstance(item["args"], list):
            raise ValueError(f'job "args" must be a list, not {type(item["args"]).__name__}')
        if "at" in item and not _is_number(item["at"]):
            raise ValueError(f'job "at" must be a numeric epoch, not {item["at"]!r}')
        if not _rb_falsy(item.get("tags")) and not isinstance(item["tags"], list):
            raise ValueError(f'job "tags" must be a list, not {item["tags"]!r}')
        name, defaults = _class_defaults(item["class"])
        msg = {**defaults, **item}  # Ruby's Hash#merge: default keys first, values overridden
        if not isinstance(msg["queue"], str) or not msg["queue"]:
            raise ValueError(f'job "queue" must be a non-empty string, not {msg["queue"]!r}')
        msg["class"] = name
        msg["args"] = list(msg["args"])
        if "unique_for" in msg or "unique_until" in msg or "expires_in" in msg \
                or "expires_at" in msg:
            _check_issue21(msg)
        if _rb_falsy(msg.get("jid")):
            msg["jid"] = new_jid()
        if _rb_falsy(msg.get("created_at")):
            msg["created_at"] = clock()
        return msg

    def _run_middleware(self, msg: dict) -> bool:
        """True if the chain reached the end (the push goes ahead); msg may be changed."""
        return self.middleware.reaches_end(msg["class"], msg, msg["queue"])

    # --- pushing ---
    def push(self, item: Mapping, *, after_commit: Any = None) -> str | None:
        """Push one job; its jid, or None if a middleware cancelled it.

        Inside a database transaction (with queued.django: Django's ``transaction.atomic()``)
        the job is checked and given its jid now, and its client middleware and its write
        wait for the commit (nothing is pushed if the transaction rolls back): the jid is
        returned at once either way. ``after_commit=False`` pushes now whatever is open; a
        database alias (str) waits for that database's transaction instead of the default's.
        Inside a task's block the job is handed to the task now, whatever ``after_commit``
        says: the task writes it with itself, and waits for a commit by its own choice."""
        sink = task_sink.get()
        if sink is not None:
            item = {**item, TASK_FIELD: sink.id}
        msg = self.normalize(item)
        # (inside a task's block the job goes with its task, which waits for a commit or not
        # by its own after_commit: never on its own, or it would reach a block already written)
        if commit_hook is not None and sink is None and after_commit is not False \
                and commit_hook(partial(self._push_checked, msg), after_commit):
            return msg["jid"]
        if not self._run_middleware(msg):
            return None
        if self._write([msg], clock(), sink):
            return None  # a duplicate of a unique job that is pending: dropped
        return msg["jid"]

    def _push_checked(self, msg: dict) -> str | None:
        """The rest of a push deferred to a commit (push's own last three steps)."""
        if not self._run_middleware(msg):
            return None
        if self._write([msg], clock()):
            return None
        return msg["jid"]

    def push_bulk(self, item: Mapping, *, batch_size: int = BULK_BATCH,
                  after_commit: Any = None) -> list[str]:
        """Sidekiq's push_bulk: ``args`` is a list of argument lists, ``at`` one epoch or one
        per job. All jobs share created_at and enqueued_at; each gets its own jid. One SADD +
        one variadic LPUSH (or ZADD) per ``batch_size`` jobs. Returns the pushed jids.

        For a unique job (``unique_for``) it returns one entry per job, in order: its jid, or
        None where the job was not pushed (a duplicate of a pending one, or cancelled by a
        middleware), as Sidekiq 7.1's push_bulk does; every lock is taken with its push, one
        script call per batch.

        Inside a transaction (see ``push``) the jobs are checked and given their jids now and
        written at the commit; every jid is returned at once (a client middleware that cancels
        one of them at the commit cancels a job whose jid was already returned)."""
        if not isinstance(item, Mapping):
            raise ValueError(f"push_bulk takes a dict, not {type(item).__name__}")
        args = item.get("args")
        if not isinstance(args, list) or not all(isinstance(a, list) for a in args):
            raise ValueError("bulk arguments must be a list of lists: [[1], [2]]")
        if not _is_number(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size!r}")
        if not args:
            return []
        item = dict(item)
        sink = task_sink.get()
        if sink is not None:
            item[TASK_FIELD] = sink.id
        at = item.pop("at", None)
        ats = at if isinstance(at, list) else None
        if ats is not None:
            if not ats or not all(map(_is_number, ats)):
                raise ValueError('job "at" must be a number or a non-empty list of numbers')
            if len(ats) != len(args):
                raise ValueError(f'"at" has {len(ats)} entries for {len(args)} jobs')
        elif at is not None and not _is_number(at):
            raise ValueError('job "at" must be a number or a non-empty list of numbers')
        normed = self._normalize(item)
        check_args(normed, args)
        if commit_hook is not None and sink is None and after_commit is not False:
            given = [new_jid() for _ in args]
            if commit_hook(partial(self._bulk, normed, args, at, ats, batch_size, None, given),
                    after_commit):
                return given
            return self._bulk(normed, args, at, ats, batch_size, sink, given)
        return self._bulk(normed, args, at, ats, batch_size, sink)

    def _bulk(self, normed: dict, args: list, at: Any, ats: list | None, batch_size: int,
              sink: Any, given: list[str] | None = None) -> list[str]:
        """push_bulk's writes, batch by batch; ``given``: the jids to use (made at the push
        when it waited for a commit), else new ones."""
        now = clock()
        jids: list[str | None] = []
        aligned = "unique_for" in normed  # (see push_bulk: one entry per job, None if dropped)
        for start in range(0, len(args), batch_size):
            if ats is None and not len(self.middleware) and not aligned:
                alike = self._push_alike(normed, args[start:start + batch_size], at, now,
                                         sink, given and given[start:start + batch_size])
                if alike is not None:
                    jids.extend(alike)
                    continue
            payloads, entries = [], []
            for i in range(start, min(start + batch_size, len(args))):
                msg = dict(normed)
                msg["args"] = list(args[i])
                msg["jid"] = given[i] if given else new_jid()
                if at is not None:
                    msg["at"] = ats[i] if ats is not None else at
                if self._run_middleware(msg):
                    payloads.append(msg)
                    entries.append(msg["jid"])
                elif aligned:
                    entries.append(None)
            dropped = self._write(payloads, now, sink) if payloads else _NONE_DROPPED
            if aligned:
                jids.extend(None if jid in dropped else jid for jid in entries)
            else:
                jids.extend(entries)
        return jids

    def push_raw(self, queue: str, payload: str | bytes) -> None:
        """SADD queues + LPUSH the exact bytes given (hand-written producers, tests)."""
        if not isinstance(queue, str) or not queue:
            raise ValueError(f"queue must be a non-empty string, not {queue!r}")

        if testing is not None:  # (queued.testing's fake or inline mode)
            testing.send(self, {queue: [payload]}, {})
            return

        def fill(pipe: Any) -> None:
            pipe.sadd(self.keys.queues, queue)
            pipe.lpush(self.keys.queue(queue), payload)

        self._pipeline(fill)

    def _push_alike(self, normed: dict, batch: list, at: Any, now: float,
                    sink: Any = None, given: list[str] | None = None) -> list[str] | None:
        """Write a bulk batch whose jobs differ only in args and jid (no middleware, one
        ``at`` for all): the payload is encoded once with markers in their place and each
        job's args and jid are spliced in. JSON encoding is compositional, so this is byte for
        byte what dumps() gives for each job (checked on the batch's first job) at about a
        third of the cost. Returns the jids, or None, having written nothing, when the text
        cannot be cut safely: a marker found twice, or non-ASCII text (dumps() falls back to
        ASCII escapes for the whole payload when args hold a lone surrogate; an ASCII head
        and tail are the same either way)."""
        scheduled = _is_number(at) and at > now
        probe = dict(normed, args=_ARGS_MARK, jid=_JID_MARK)
        if "expires_in" in probe:  # (the same step as _write's, in the same key order)
            expiry.stamp(probe, at if scheduled else now)
        if not scheduled:
            probe["enqueued_at"] = now
        text, args_mark, jid_mark = dumps(probe), dumps(_ARGS_MARK), dumps(_JID_MARK)
        if not text.isascii() or text.count(args_mark) != 1 or text.count(jid_mark) != 1:
            return None
        head, _, rest = text.partition(args_mark)
        middle, _, tail = rest.partition(jid_mark)
        if jid_mark in head:  # the item put its own "jid" key before "args"
            return None
        jids = given or [new_jid() for _ in batch]
        arg_texts = [dumps(job_args) for job_args in batch]
        texts = [f"{head}{a}{middle}{_quote(jid)}{tail}" for a, jid in zip(arg_texts, jids)]
        if texts[0] != dumps({**probe, "args": list(batch[0]), "jid": jids[0]}):
            return None
        if sink is not None:
            # The records, spliced the same way: {"class", "queue", "args"[, "at"]}.
            queue = normed["queue"]
            start = f'{{"class":{dumps(normed["class"])},"queue":{dumps(queue)},"args":'
            end = f',"at":{dumps(at)}}}' if scheduled else "}"
            where = (None, at) if scheduled else (queue, None)
            sink.collect([(jid, f"{start}{a}{end}", *where, text)
                          for a, jid, text in zip(arg_texts, jids, texts)])
        elif scheduled:
            self._send({}, dict.fromkeys(texts, at))
        else:
            self._send({normed["queue"]: texts}, {})
        return jids

    def _write(self, payloads: Iterable[dict], now: float, sink: Any = None) -> frozenset:
        """One pipeline: a future ``at`` -> ZADD schedule (no at, no enqueued_at); everything
        else -> SADD queues + LPUSH queue:<q> with enqueued_at = now. Inside a task's block
        the jobs and their records go to the task instead (task.py writes them). A unique
        job goes with its lock instead (unique_push.lua). Returns the jids of the jobs dropped
        as duplicates (none, as a rule)."""
        queued: dict[str, list[str]] = {}
        scheduled: dict[str, float] = {}
        entries: list[tuple] = []  # for a task: (jid, record, queue or None, payload, at)
        locked: list[tuple] = []   # unique jobs: (lock, payload, at or None, queue)
        for msg in payloads:
            at = msg.pop("at", None)
            later = _is_number(at) and at > now
            if "expires_in" in msg:
                expiry.stamp(msg, at if later else now)
            lock = self._lock(msg, at - now if later else 0.0) if "unique_for" in msg else None
            if later:
                text = dumps(msg)
                if lock is None:
                    scheduled[text] = at
                where: tuple = (None, at)
            else:
                msg["enqueued_at"] = now
                text = dumps(msg)
                if lock is None:
                    queued.setdefault(msg["queue"], []).append(text)
                where, at = (msg["queue"], None), None
            if lock is not None:
                locked.append((lock, text, at, msg["queue"]))
            if sink is not None:
                record = {"class": msg["class"], "queue": msg["queue"], "args": msg["args"]}
                if at is not None:
                    record["at"] = at
                entries.append((msg["jid"], dumps(record), *where, text))
        if sink is not None:
            sink.collect(entries, {lock.jid: (lock, queue) for lock, _t, _a, queue in locked})
            return _NONE_DROPPED
        if queued or scheduled:
            self._send(queued, scheduled)
        return self._send_locked(locked) if locked else _NONE_DROPPED

    def _lock(self, msg: dict, delay: float) -> unique.Lock | None:
        """A unique job's lock; its digest written into the payload (unique.py says why)."""
        if unique.period(msg) is None:
            return None
        msg[unique.DIGEST] = unique.digest(msg)
        return unique.lock_of(self.keys, msg, delay)

    def _send_locked(self, locked: list[tuple]) -> frozenset:
        """Push unique jobs, each with its lock taken in the same step (unique_push.lua);
        the jids of those dropped as duplicates. (queued.testing's modes take every push:
        there is no Redis to hold a lock.)"""
        if testing is not None:
            queued: dict[str, list[str]] = {}
            scheduled: dict[str, float] = {}
            for _lock, text, at, queue in locked:
                if at is None:
                    queued.setdefault(queue, []).append(text)
                else:
                    scheduled[text] = at
            testing.send(self, queued, scheduled)
            return _NONE_DROPPED
        keys, args = unique_push_call(self.keys, locked)
        pushed = unique.UNIQUE_PUSH(self.redis, keys, args)
        return frozenset(lock.jid for (lock, *_), ok in zip(locked, pushed) if not ok)

    def _send(self, queued: dict[str, list[str]], scheduled: dict[str, float]) -> None:
        """SADD queues + LPUSH queue:<q> of the encoded payloads by queue, ZADD schedule of
        the scheduled ones (payload -> at), in one round trip."""
        if testing is not None:  # (queued.testing's fake or inline mode)
            testing.send(self, queued, scheduled)
            return

        def fill(pipe: Any) -> None:
            if queued:
                pipe.sadd(self.keys.queues, *queued)
                for queue, jobs in queued.items():
                    pipe.lpush(self.keys.queue(queue), *jobs)
            if scheduled:
                pipe.zadd(self.keys.schedule, scheduled)

        self._pipeline(fill)

    def _pipeline(self, fill: Any) -> list:
        """Run the commands ``fill`` adds (through the pipeline methods ``sadd``, ``lpush``,
        ``zadd``) in one round trip, as Sidekiq's non-transactional pipeline does; like Sidekiq,
        reconnect and try once more after a failover error."""
        for attempt in (1, 2):
            try:
                if self._direct:
                    commands = _Commands()
                    fill(commands)
                    return self._execute(commands)
                pipe = self.redis.pipeline(transaction=False)
                fill(pipe)
                return pipe.execute()
            except ResponseError as e:  # ReadOnlyError is one
                failover = isinstance(e, ReadOnlyError) or str(e).startswith(_RETRYABLE)
                if attempt == 2 or not failover:
                    raise
                self.redis.connection_pool.disconnect()
                for conn in self._idle:
                    conn.disconnect()
        raise AssertionError("unreachable")

    def _execute(self, commands: list[tuple]) -> list:
        """Write ``commands`` in one packet on one of our connections and read every reply:
        redis-py's non-transactional pipeline, minus its overhead. Connection errors are
        retried by the connection's own ``retry`` policy, as redis-py's pipeline does; the
        first error reply is raised once all replies are read, so the socket stays in step."""
        conn = self._connection()
        try:
            replies = conn.retry.call_with_retry(lambda: _round_trip(conn, commands),
                                                 lambda error: conn.disconnect())
        except BaseException:
            conn.disconnect()  # a reply may be left unread: never reuse the socket as it is
            raise
        finally:
            self._idle.append(conn)
        for reply in replies:
            if isinstance(reply, ResponseError):
                raise reply
        return replies

    def _connection(self) -> Any:
        """An idle connection of ours, or a new one made like the pool makes its own. One the
        server closed meanwhile (Redis restarted, CLIENT KILL, its idle timeout) is
        disconnected first, so the push connects afresh instead of failing: redis-py's pool
        makes the same check on every checkout, with three system calls where this makes one."""
        try:
            conn = self._idle.pop()
        except IndexError:
            pool = self.redis.connection_pool
            return pool.connection_class(**pool.connection_kwargs)
        if _closed_while_idle(conn):
            conn.disconnect()
        return conn


def _closed_while_idle(conn: Any) -> bool:
    """True if an idle connection's socket is readable: end of file (the server closed it), or
    data nobody asked for. Either way it must not carry the next command."""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return False
    probe = select.poll()
    probe.register(sock, select.POLLIN)
    return bool(probe.poll(0))


def _check_issue21(msg: dict) -> None:
    """A push's unique and expiry keys (unique.py, expiry.py): None means "not set", as in
    set(); anything else must be usable, or the push fails naming the key."""
    for key in ("unique_for", "unique_until", "expires_in"):
        if key in msg and msg[key] is None:
            del msg[key]
    unique.check_item(msg)
    expiry.check_item(msg)


def unique_push_call(keys: Keys, locked: list[tuple], task_keys: tuple[str, str] | None = None,
                     task_ttl_ms: int = 0, records: dict[str, str] | None = None
                     ) -> tuple[list, list]:
    """KEYS and ARGV of unique_push.lua for ``locked`` jobs: (Lock, payload, at or None,
    queue) each; with ``task_keys`` (its records hash, its enqueued set), the jobs of a task,
    their records in ``records`` (jid -> JSON)."""
    ks = [keys.queues, keys.schedule, keys.counter("unique_dropped"), *(task_keys or ())]
    args: list = [str(task_ttl_ms) if task_keys else "", len(locked)]
    for lock, text, at, queue in locked:
        ks += [lock.key, keys.queue(queue)]
        args += [lock.jid, lock.ttl_ms, text, "" if at is None else repr(float(at)), queue,
                 (records or {}).get(lock.jid, "")]
    return ks, args


def _quote(jid: str) -> str:
    """A jid as a JSON string: hex needs no escaping (anything else goes through dumps)."""
    return f'"{jid}"' if jid.isascii() and jid.isalnum() else dumps(jid)


#: Every Client, so that a forked child can drop the connections it inherited.
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


def _forget_connections_after_fork() -> None:
    """In a forked child, no Client may use its parent's sockets: each starts with none. The
    inherited connection objects are dropped unused; redis-py closes a socket it did not open
    without shutting it down, so the parent's connection is untouched. (A hook rather than a
    getpid() per push: that is one system call less per job.)"""
    for client in list(_clients):
        client._idle = []


os.register_at_fork(after_in_child=_forget_connections_after_fork)


class _Commands(list):
    """The pipeline methods a push uses, recording each command as its argument tuple."""

    def sadd(self, key: str, *members: str) -> None:
        self.append(("SADD", key, *members))

    def lpush(self, key: str, *values: str | bytes) -> None:
        self.append(("LPUSH", key, *values))

    def zadd(self, key: str, mapping: dict) -> None:
        args: list = ["ZADD", key]
        for member, score in mapping.items():  # redis-py's order: score, then member
            args += (score, member)
        self.append(tuple(args))


def _round_trip(conn: Any, commands: list[tuple]) -> list:
    """Send every command in one write, then read one reply per command (error replies are
    returned, not raised, so every reply is read)."""
    conn.send_packed_command(pack_commands(conn, commands))
    replies = []
    for _ in commands:
        try:
            replies.append(conn.read_response())
        except ResponseError as e:
            replies.append(e)
    return replies


# --- the process-wide default client -----------------------------------------------------------
#
# The daemon calls configure(url=..., namespace=...) in the master before forking. That is safe:
# redis-py's ConnectionPool remembers the pid that created it and, on first use in a forked
# child, drops the inherited connections without touching their sockets (ConnectionPool.
# _checkpid -> reset()), so a child never shares a socket with its parent
# (tests/test_client.py::test_default_client_survives_fork checks this).

_default: Client | None = None
_default_lock = threading.Lock()


def configure(*, url: str | None = None, namespace: str | None = None,
              redis: redis_lib.Redis | None = None) -> Client:
    """Set (and return) the default client every ``Job.perform_*`` pushes through."""
    global _default
    new = Client(redis, url=url, namespace=namespace)
    with _default_lock:
        _default = new
    return new


def default_client() -> Client:
    """The default client; made on first use from ``REDIS_URL`` (else
    redis://127.0.0.1:6379/0), no namespace, unless ``configure()`` was called."""
    global _default
    c = _default
    if c is None:
        with _default_lock:
            if _default is None:
                _default = Client()
            c = _default
    return c


def get_redis() -> redis_lib.Redis:
    """The redis-py client of the default client: inside a job, the same server the daemon
    fetched the job from. For the job's own keys (no namespace is applied to them).

    In a worker process it is a client with one dedicated connection (see
    ``dedicate_job_connection``): threads a job starts share that connection, one command at
    a time; give them clients of their own if they talk to Redis a lot."""
    return default_client().redis


#: Connections an async client opens at most; more commands at once wait for one (a worker
#: may run a thousand async jobs at once: a connection each would be a thousand sockets).
ASYNC_MAX_CONNECTIONS = 50


def get_async_redis():
    """A ``redis.asyncio`` client of the same server as ``get_redis()``, for ``async def``
    jobs: one per event loop (a worker's loop is one per process), made on first use, so its
    connection pool lives as long as the loop and is never shared with another loop. Its
    pool holds ASYNC_MAX_CONNECTIONS connections; a command past them waits for one."""
    loop = asyncio.get_running_loop()
    found = _async_clients.get(loop)
    if found is None:
        found = _async_clients[loop] = _async_twin(default_client())
    return found


_async_clients: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _async_twin(c: Client):
    import redis.asyncio as aioredis
    if c.url is not None:
        if not sentinel.is_sentinel_url(c.url):
            return aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(
                c.url, max_connections=ASYNC_MAX_CONNECTIONS, timeout=None))
        from redis.asyncio.sentinel import Sentinel
        s = sentinel.parse(c.url)
        auth = {k: v for k, v in (("username", s.username), ("password", s.password)) if v}
        return Sentinel(list(s.sentinels)).master_for(s.service_name, db=s.db, **auth)
    # A client the application handed to configure(redis=...): the same address and login.
    kw = dict(getattr(c.redis.connection_pool, "connection_kwargs", {}))
    kw["unix_socket_path"] = kw.get("path")
    return aioredis.Redis(max_connections=ASYNC_MAX_CONNECTIONS, **{
        k: kw[k] for k in ("host", "port", "db", "username", "password", "unix_socket_path")
        if kw.get(k) is not None})


# --- job code's connection in a worker ---------------------------------------------------------

def dedicate_job_connection() -> None:
    """Give the default client a redis-py client of one dedicated connection with a short path
    for plain commands (jobredis.py), if queued made that client from a URL (one the
    application passed to ``configure(redis=...)`` is left as it is). Called once by each
    worker process of one job at a time after fork; job code sees it through ``get_redis()``.
    If Redis cannot be reached right now, the pooled client stays: it works the same, only
    slower."""
    c = _default
    if c is None or not c.owns_redis:
        return
    from .jobredis import dedicated  # (only a worker needs it)
    try:
        c.redis = dedicated(c.redis)  # connects now
    except (redis_lib.ConnectionError, redis_lib.TimeoutError, OSError):
        pass
