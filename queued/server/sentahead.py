"""The worker's own Redis connection, and the calls sent on it ahead of their replies.

Round trips are the cost of a job, so a worker waits for as few replies as it can. What it
writes without waiting rides on this one connection, and its reply is read with the next
call's (``_unread``, in the order they went out):

Before a job that may run long (its class is new or recently took 2 ms or more), the batch's
finished jobs are acked without waiting for the reply (``send_acks``: one write, the reply is
read with the next call), so they never stay reserved while a long job runs; before a job
known to be short they ride with the next reserve call. A worker killed before a finished
job's ack went out runs that job again; at-least-once allows it and docs/operating.md says so.

A job of a task that succeeded ends with its state in the task: those ends are gathered per
task and written as the acks are, one finish.lua call per task (finishes.py), in the same
write as the next reserve call (just before it). A job that may run long is marked working in
its task as it starts, sent ahead (``send_ahead``): its reply is read with the next call's,
so a task's job waits for no extra round trip. An end Redis refused, or whose outcome a broken
connection hid, is run again before the next reserve (the reserve would otherwise hand its
still-reserved job back as a lost one; a finish refused in the write of a reserve call has
its jobs kept out of what that call adopts).

Owns the connection, the pending acks, the calls sent ahead and those to run again
(``_unread``, ``_again``, ``_held``). Not the reserve call nor what it hands over: Fetcher
(fetch.py) is built on this class, and its ``_settle`` reads a reserve reply sent ahead
(``_sent``) before anything else is read on the connection. A class, not a helper object, so
the calls of a job's path stay direct method calls on the one Fetcher (no hop per job).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, NamedTuple

import redis

from .. import connection
from .. import tracking
from .finishes import Call, Finishes
from .reserved import GONE, REFUSED, failure_call
from .scripts import FAIL, FINISH
from ..keys import Keys
from ..tracking import Move, blocked_keys

log = logging.getLogger("queued.fetch")


class _Ahead(NamedTuple):
    """A script call sent ahead (send_ahead). ``keep``: it must take effect (a job's end):
    refused, or its outcome lost with the connection, it is run again (it is idempotent);
    otherwise (a mark that only informs) it may be dropped."""
    script: Any
    keys: list
    args: list
    keep: bool
    call: Call | None = None  # a finish.lua call's jobs (finishes.py)


#: Replies of calls sent ahead that may wait unread; past this they are read at once.
AHEAD_MAX = 64
#: A job's end sent ahead that Redis refused before any write (REFUSED) is run again this
#: often (seconds); the condition is logged at most every HELD_LOG_EVERY seconds.
HELD_RETRY, HELD_LOG_EVERY = 5.0, 60.0


class SentAhead:
    #: Fetcher's reserve call sent ahead (fetch._Sent), whose reply ``_settle`` reads before
    #: any other; its ``acks`` went out with it.
    _sent = None

    def __init__(self, url: str, keys: Keys, identity: str, slot: int, block_seconds: float,
                 dead_timeout: int, dead_max_jobs: int):
        self.keys = keys
        self.slot = slot
        self.dead_timeout = dead_timeout
        self.dead_max_jobs = dead_max_jobs
        self.reserved_key = keys.reserved(identity, slot)
        # (longer than a blocking command waits: fetch.py's block and wait)
        self.redis = connection.make_redis(
            url, socket_timeout=block_seconds + connection.SOCKET_TIMEOUT,
            name=f"queued-worker-{slot}")
        self._conn = None
        self.client_id = 0  # of the connection above, once made (see _connection)
        self._acks: list[bytes] = []  # finished jobs whose ZREM goes out with the next call
        #: Called before acks or a task's ends go out: the worker writes the done lines of the
        #: jobs they end first (log.py; a kill -9 then loses no line of a job acked)
        self.before_ends: Callable[[], None] | None = None
        #: jobs of tasks that succeeded, whose ends go out with the acks (finishes.py)
        self.finishes = Finishes(keys, self.reserved_key)
        #: acks (lists of members) and script calls (_Ahead) sent ahead, replies unread
        self._unread: list[list[bytes] | _Ahead] = []
        self._again: list[_Ahead] = []  # calls sent ahead to run again (see _Ahead)
        self._held: list[_Ahead] = []  # ends refused before any write, run again at _held_at
        self._held_at = self._held_logged = 0.0
        self._loaded: set[str] = set()  # SHAs of scripts sent ahead as EVAL on this connection
        # After a broken connection the pending acks may already have been applied (the call
        # ran, its reply was lost), so the next ack finding nothing is no cause for a warning.
        self._acks_uncertain = False

    # --- the dedicated connection ---------------------------------------------------------
    def _connection(self):
        if self._conn is None:
            conn = self.redis.connection_pool.get_connection()
            try:
                # The master wakes a blocked worker by this id (CLIENT UNBLOCK: waker.py).
                conn.send_command("CLIENT", "ID")
                self.client_id = int(conn.read_response())
            except redis.ResponseError:  # refused (an ACL without CLIENT): nobody wakes us
                self.client_id = 0
            except BaseException:
                conn.disconnect()
                raise
            self._conn = conn
        return self._conn

    def connect(self) -> int:
        """Make sure the connection is up; its Redis client id (0 if Redis refused to say)."""
        self._connection()
        return self.client_id

    def _call(self, *args, with_acks: bool = True, after_send=None):
        """One command on the worker's own connection; pending acks ride in the same write
        (reserve passes them inside the script instead). ``after_send`` is called once the
        command is on its way, before the reply is awaited."""
        self._settle()
        conn = self._connection()
        commands = []
        if with_acks:  # (in the order their entries go into _unread)
            self._ends_out()
            commands += self._finish_commands()
            if self._acks:
                commands.append(("ZREM", self.reserved_key, *self._acks))
                self._unread.append(self._acks)  # its reply is read like send_acks' replies
                self._acks = []
        commands.append(args)
        try:
            conn.send_packed_command(connection.pack_commands(conn, commands))
            if after_send is not None:
                after_send()
            self._read_unread(conn)
            return conn.read_response()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self.reset_connection()
            raise

    def _settle(self) -> None:
        """Read the reply of a call that must be read before any other (Fetcher: a reserve
        call sent ahead); nothing here."""

    def run_script(self, script, keys: list, args: list):
        """One script call on the worker's connection, its reply awaited (issue 21's guards:
        a unique job's lock at its start, an over-limit job's wake time)."""
        return self._script(script, keys, args)

    def _script(self, script, keys, args, with_acks: bool = True):
        try:
            return self._call(*script.command(keys, args), with_acks=with_acks)
        except redis.exceptions.NoScriptError:
            return self._call(*script.eval_command(keys, args), with_acks=with_acks)

    # --- acks and calls sent ahead, their replies read with the next call's --------------
    def _acked(self, sent: int, found: int) -> None:
        if found < sent and not self._acks_uncertain:
            log.warning("%d finished job(s) had lost their reservation (recovered after a lease "
                        "expiry); they may run again", sent - found)
        self._acks_uncertain = False

    def _read_unread(self, conn, limit: int | None = None) -> None:
        """Read the replies of the acks sent ahead, every one of them, so the connection
        stays in step. An ack Redis refused (NOREPLICAS, MISCONF, READONLY) goes back to the
        pending acks. Before, the refusal was raised with the later replies left unread, and
        the next call read a reply meant for another command (found by tests/faults)."""
        while self._unread and (limit is None or limit > 0):
            if limit is not None:
                limit -= 1
            entry = self._unread[0]
            try:
                found = conn.read_response()
            except redis.ResponseError as e:
                self._unread.pop(0)
                if isinstance(e, redis.exceptions.NoScriptError) and isinstance(entry, _Ahead):
                    # Redis lost its scripts (SCRIPT FLUSH, a failover): the next call of
                    # this script on this connection goes as EVAL again (else every later
                    # mark of this worker was refused too)
                    self._loaded.discard(entry.script.sha)
                if isinstance(entry, _Ahead):
                    # Only a job's end is run again. A mark that only informs is dropped: run
                    # later, it could undo what a later call did (a job's working mark run
                    # again after its end would leave it working for good).
                    if entry.keep:
                        self._again.append(entry)
                    else:
                        log.debug("a task mark was refused and dropped: %s", e)
                else:
                    self._acks.extend(entry)
                continue
            # (on a connection error they stay in _unread: reset_connection keeps them)
            self._unread.pop(0)
            if not isinstance(entry, _Ahead):
                self._acked(len(entry), found)
            elif entry.call is not None:
                self._finished_reply(entry, found)
            elif entry.keep and found == GONE:
                self._acked(1, 0)
            elif entry.keep and found == REFUSED:
                self._hold(entry)

    def _read_acks(self) -> None:
        """Read the replies of the acks sent ahead (they came long ago, as a rule)."""
        try:
            self._read_unread(self._connection())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self.reset_connection()
            raise

    def _ends_out(self) -> None:
        """Acks or a task's ends are about to go out: see ``before_ends``."""
        if self.before_ends is not None and (self._acks or self.finishes.pending):
            self.before_ends()

    def send_acks(self) -> None:
        """Send the pending acks now without waiting for the reply (it is read with the next
        call's). The worker does this between the jobs of a batch: without it the finished
        jobs of a batch stayed reserved while its later jobs ran, however long they took, and
        ran again if the worker died meanwhile. Never raises: on a connection error the acks
        stay pending and go out with the next call."""
        if not (self._acks or self.finishes.pending) or self._sent is not None:
            return  # (with a reserve reply unread, they go out with the next call)
        self._ends_out()
        try:
            conn = self._connection()
            commands = self._finish_commands()
            if self._acks:
                commands.append(("ZREM", self.reserved_key, *self._acks))
                self._unread.append(self._acks)
                self._acks = []
            conn.send_packed_command(connection.pack_commands(conn, commands))
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self.reset_connection()

    def reset_connection(self) -> None:
        """Drop the connection after an error or an interrupted blocking read. Unsent acks
        stay pending and go out with the next call (ZREM is idempotent)."""
        if self._sent is not None:
            self._unread.insert(0, self._sent.acks)
            self._sent = None
        self._again += [e for e in self._unread if isinstance(e, _Ahead) and e.keep]
        self._acks = [m for entry in self._unread if not isinstance(entry, _Ahead)
                      for m in entry] + self._acks
        self._unread = []
        self._loaded = set()
        self._acks_uncertain = bool(self._acks)
        if self._conn is not None:
            try:
                self._conn.disconnect()
            finally:
                self._conn = None

    def send_ahead(self, script, keys: list, args: list, keep: bool) -> None:
        """Send a script call without waiting for its reply (read with the next call's). Never
        raises: on a connection error a ``keep`` call is run again later, another dropped."""
        entry = _Ahead(script, keys, args, keep)
        try:
            if len(self._unread) >= AHEAD_MAX:
                self._settle()
                self._read_acks()
            conn = self._connection()
            # The first call of a script on a connection carries its source (EVAL), so Redis
            # has it (a fresh or restarted Redis would refuse EVALSHA with NOSCRIPT).
            if script.sha in self._loaded:
                command = script.command(keys, args)
            else:
                command = script.eval_command(keys, args)
                self._loaded.add(script.sha)
            self._unread.append(entry)
            conn.send_packed_command(connection.pack_commands(conn, [command]))
        except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError):
            if keep and not any(e is entry for e in self._unread):
                self._again.append(entry)
            self.reset_connection()

    def _run_again(self) -> None:
        """Run the calls sent ahead that must take effect and did not (see _Ahead), in order;
        raises as a call does (they stay to be run again). Those Redis refused before any
        write (fail.lua's REFUSED) are run again every HELD_RETRY seconds."""
        if self._held and time.monotonic() >= self._held_at:
            self._again += self._held
            self._held, self._held_at = [], 0.0
        while self._again:
            entry = self._again[0]
            written = self._script(entry.script, entry.keys, entry.args)
            self._again.pop(0)
            if entry.call is not None:
                self._finished_reply(entry, written, again=True)
            elif written == REFUSED:
                self._hold(entry)

    def _hold(self, entry: _Ahead) -> None:
        """A job's end refused before any write (a task's callback queue key of another type:
        fail.lua): the job stays reserved, marked, and the end is run again later."""
        self._held.append(entry)
        now = time.monotonic()
        if not self._held_at:
            self._held_at = now + HELD_RETRY
        if now >= self._held_logged + HELD_LOG_EVERY:
            self._held_logged = now
            log.error("the end of a job of a task was refused: it would complete the task, "
                      "and %s holds another Redis type (WRONGTYPE); the job stays reserved "
                      "and its end is written once the key is fixed (%d held by worker %d)",
                      self._blocked_keys(entry), len(self._held), self.slot)

    def _blocked_keys(self, entry: _Ahead) -> str:
        """For the log line: which callback queue keys hold another type (fail.lua's ARGV[11]
        is the task's id)."""
        try:
            found = blocked_keys(self.redis, self.keys, entry.args[10])
        except (redis.RedisError, OSError, IndexError):
            found = []
        return ", ".join(found) or "a callback's queue key"

    def flush(self) -> None:
        """Send pending acks now (before the worker exits or blocks)."""
        self._settle()
        self._run_again()
        if self._acks or self._unread or self.finishes.pending:
            self._ends_out()
            conn = self._connection()
            try:
                commands = self._finish_commands()
                if self._acks:
                    commands.append(("ZREM", self.reserved_key, *self._acks))
                    self._unread.append(self._acks)
                    self._acks = []
                if commands:
                    conn.send_packed_command(connection.pack_commands(conn, commands))
                self._read_unread(conn)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                self.reset_connection()
                raise

    # --- the ends of jobs of a task, gathered (finishes.py) -------------------------------
    def _finish_commands(self) -> list[tuple]:
        """The finish.lua calls of what is pending, for the caller's next write; their
        replies are read with the next ones (as sent ahead: keep, run again if lost)."""
        commands = []
        for call in self.finishes.take():
            if FINISH.sha in self._loaded:
                commands.append(FINISH.command(call.keys, call.args))
            else:  # (the first on a connection: see send_ahead)
                commands.append(FINISH.eval_command(call.keys, call.args))
                self._loaded.add(FINISH.sha)
            self._unread.append(_Ahead(FINISH, call.keys, call.args, True, call))
        return commands

    def _finished_reply(self, entry: _Ahead, reply, again: bool = False) -> None:
        """What finish.lua answered (see there): the jobs' records it lacks are written;
        refused, each job ends with fail.lua as it did before these were gathered. Run
        ``again`` (its first outcome lost with a connection), a reservation not found is no
        news: the first run may have ended it."""
        call = entry.call
        if reply == REFUSED:
            for item in call.items:
                keys, args = failure_call(
                    self.keys, self.reserved_key, item.member, "done", 0.0, "",
                    self.dead_timeout, self.dead_max_jobs,
                    task=Move(self.finishes.task_id(call), item.jid, "finished"))
                self._again.append(_Ahead(FAIL, keys, args, True))
            return
        found, missing = reply
        if found < len(call.items) and not again:
            self._acked(len(call.items), found)
        for keys, args in self.finishes.records(call, missing):
            self.send_ahead(tracking.TASK_MARK, keys, args, keep=False)

    def close(self) -> None:
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - closing after Redis went away: the master recovers
            pass
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None
