"""Reliable fetch, the worker's side: reserve, block, ack and fail.

A worker slot owns two kinds of keys (keys.py): a reserved zset holding the jobs it has taken,
and one landing list per queue that an idle worker BLMOVEs into. A job is always in a queue,
a landing list, the reserved zset, or (after a failure) retry/dead: never only in memory. So
when the worker dies, the master puts everything the slot holds back (recovery.py).

Round trips are the cost of a job, so one call does two things: it acks the jobs the worker
finished and reserves up to ``batch`` more (reserve.lua). The batch grows while jobs are short
and the queue is deep (see Worker), so a deep queue costs well under one round trip per job.
Before a job that may run long (its class is new or recently took 2 ms or more), the batch's
finished jobs are acked without waiting for the reply (``send_acks``: one write, the reply is
read with the next call), so they never stay reserved while a long job runs; before a job
known to be short they ride with the next reserve call. A worker killed before a finished
job's ack went out runs that job again; at-least-once allows it and docs/operating.md says so.

A job that arrives while the worker is idle is started from BLMOVE's reply: the reserve call
that moves it from the landing list into the reserved zset is sent, and its reply read only
when the job has run (``reserve_landed`` / ``claim``). That is one round trip less between a
push and the job's start. The job is in Redis all along (landing list, then reserved zset).
If the reply is lost (the connection broke while the job ran), a job that succeeded is
remembered and acked when the next reserve hands it back, so it does not run twice.

A job of a task that succeeded ends with its state in the task: those ends are gathered per
task and written as the acks are, one finish.lua call per task (finishes.py), in the same
write as the next reserve call (just before it). A job that may run long is marked working in
its task as it starts, sent ahead (``send_ahead``): its reply is read with the next call's,
so a task's job waits for no extra round trip. An end Redis refused, or whose outcome a broken
connection hid, is run again before the next reserve (the reserve would otherwise hand its
still-reserved job back as a lost one; a finish refused in the write of a reserve call has
its jobs kept out of what that call adopts).
"""
from __future__ import annotations

import logging
import random
import time
from typing import Any, NamedTuple, Sequence

import redis

from .. import connection
from . import retry
from .finishes import Call, Finishes
from .scripts import FAIL, FINISH, RESERVE
from .. import tracking
from ..keys import Keys
from ..tracking import Move, blocked_keys

log = logging.getLogger("queued.fetch")

#: How many jobs that succeeded while their reservation reply was lost are remembered, to be
#: acked instead of run when a reserve hands them back (one that never comes back, because
#: another master recovered it, must not be kept for ever).
FINISHED_KEPT = 100


#: fail.lua's replies: the failure is written; the reservation was gone (recovered by another
#: master: nothing written); refused: the target key holds another Redis type (nothing written,
#: the reservation kept and marked, so the caller retries the write later).
WRITTEN, GONE, REFUSED = 1, 0, -1


class Reservation(NamedTuple):
    member: bytes   # exact bytes in the reserved zset (ack and fail remove exactly these)
    queue: str      # the queue the job was taken from (Sidekiq: this, not payload["queue"])
    payload: bytes  # the job JSON exactly as the producer wrote it


class _Sent(NamedTuple):
    n: int
    keys: list
    args: list
    acks: list[bytes]
    ahead: int = 0  # entries of _unread sent in the same write, before it (finishes)


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


def split_member(member: bytes) -> tuple[str, bytes]:
    """``queue NUL token NUL payload`` -> (queue, payload)."""
    a = member.index(b"\0")
    b = member.index(b"\0", a + 1)
    return member[:a].decode("utf-8", "replace"), member[b + 1:]


def failure_call(keys: Keys, reserved_key: str, member: bytes, kind: str, score: float,
                 payload: str | bytes, dead_timeout: int, dead_max_jobs: int,
                 queue: str = "", task: Move | None = None) -> tuple[list, list]:
    """KEYS and ARGV of fail.lua, for the worker (Fetcher.fail) and the master alike. Kinds:
    retry, dead, drop; a job's own release: later (to schedule), queue (to ``queue``); done
    (a job of a task that succeeded). ``task``: the job's move in its task."""
    target = {"retry": keys.retry, "later": keys.schedule,
              "queue": keys.queue(queue)}.get(kind, keys.dead)
    trim = retry.dead_trim_bounds(score, dead_timeout, dead_max_jobs)
    ks = [reserved_key, target, keys.queues]
    args = [member, kind, repr(float(score)), payload, repr(trim.min_score_exclusive),
            trim.rank_stop, queue]
    if task is not None:
        ks += task.keys(keys)
        args += task.args(keys)
    return ks, args


def fetch_orders(names: Sequence[str], weighted: Sequence[str], strict: bool, n: int,
                 rng: random.Random) -> list[int]:
    """Queue orders for n fetches as 1-based indexes into ``names``, flattened.

    Strict: one fixed order (the script reuses it). Weighted: Sidekiq's ``shuffle.uniq`` of
    the weight-expanded list, drawn afresh for every job.
    """
    index = {name: i + 1 for i, name in enumerate(names)}
    if strict or len(names) == 1:
        return list(range(1, len(names) + 1))
    out: list[int] = []
    for _ in range(n):
        pool = list(weighted)
        rng.shuffle(pool)
        out.extend(index[q] for q in dict.fromkeys(pool))
    return out


class Fetcher:
    def __init__(self, url: str, keys: Keys, identity: str, slot: int, queues: Sequence[str],
                 weighted: Sequence[str], strict: bool, block_seconds: float,
                 dead_timeout: int, dead_max_jobs: int):
        self.keys = keys
        self.identity = identity
        self.slot = slot
        self.queues = tuple(queues)
        self.weighted = tuple(weighted)
        self.strict = strict
        self.block_seconds = block_seconds
        self.dead_timeout = dead_timeout
        self.dead_max_jobs = dead_max_jobs
        self.reserved_key = keys.reserved(identity, slot)
        self.queue_keys = [keys.queue(q) for q in self.queues]
        self.landings = {q: keys.landing(identity, slot, q) for q in self.queues}
        self.idle_key = keys.idle(identity, slot)
        # Idle workers spread over the queues, so with as many workers as queues a new job on
        # any queue wakes someone at once; the others are found by the next reserve.
        self.block_queue = self.queues[slot % len(self.queues)]
        # The queue of the last blocking fetch: the next reserve call empties its landing list,
        # so a job whose BLMOVE reply was lost is handed over there (reserve.lua: adoption).
        self._landing_queue = self.block_queue
        self.rng = random.Random()
        self.redis = connection.make_redis(
            url, socket_timeout=block_seconds + connection.SOCKET_TIMEOUT,
            name=f"queued-worker-{slot}")
        self._conn = None
        self.client_id = 0  # of the connection above, once made (see _connection)
        self._acks: list[bytes] = []  # finished jobs whose ZREM goes out with the next call
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
        #: Queues whose key the last reserve found not to be a list (reserve.lua skips them).
        self.bad_queues: list[str] = []
        #: Whether the last reserve tried every queue (it found no job: the check is complete).
        self.checked_all = False
        #: False when the last reserve found the master's registration gone (reserve.lua):
        #: it took nothing, and the worker must not block either until it is back.
        self.registered = True
        #: Queues the last reserve found paused (passed over; an idle worker waits elsewhere).
        self.paused: list[str] = []
        self._sent: _Sent | None = None  # a reserve call sent whose reply is still unread
        self._taken: list[Reservation] = []  # read from that reply, not claimed yet
        self._finished: list[bytes] = []  # payloads run whose reservation reply was lost
        #: A reserve call without adoption lost its reply (see reserve).
        self.lost_reply = False

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
            commands += self._finish_commands()
            if self._acks:
                commands.append(("ZREM", self.reserved_key, *self._acks))
                self._unread.append(self._acks)  # its reply is read like send_acks' replies
                self._acks = []
        commands.append(args)
        try:
            conn.send_packed_command(conn.pack_commands(commands))
            if after_send is not None:
                after_send()
            self._read_unread(conn)
            return conn.read_response()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            self.reset_connection()
            raise

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

    def send_acks(self) -> None:
        """Send the pending acks now without waiting for the reply (it is read with the next
        call's). The worker does this between the jobs of a batch: without it the finished
        jobs of a batch stayed reserved while its later jobs ran, however long they took, and
        ran again if the worker died meanwhile. Never raises: on a connection error the acks
        stay pending and go out with the next call."""
        if not (self._acks or self.finishes.pending) or self._sent is not None:
            return  # (with a reserve reply unread, they go out with the next call)
        try:
            conn = self._connection()
            commands = self._finish_commands()
            if self._acks:
                commands.append(("ZREM", self.reserved_key, *self._acks))
                self._unread.append(self._acks)
                self._acks = []
            conn.send_packed_command(conn.pack_commands(commands))
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
            conn.send_packed_command(conn.pack_command(*command))
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

    def run_script(self, script, keys: list, args: list):
        """One script call on the worker's connection, its reply awaited (issue 21's guards:
        a unique job's lock at its start, an over-limit job's wake time)."""
        return self._script(script, keys, args)

    def _script(self, script, keys, args, with_acks: bool = True):
        try:
            return self._call(*script.command(keys, args), with_acks=with_acks)
        except redis.exceptions.NoScriptError:
            return self._call(*script.eval_command(keys, args), with_acks=with_acks)

    # --- operations -------------------------------------------------------------------------
    def reserve(self, n: int, landing_queue: str | None = None,
                adopt: bool = True) -> list[Reservation]:
        """Take up to n jobs (and whatever a blocking fetch landed) without blocking.

        With ``adopt``, the caller must hold nothing of this slot but the finished jobs it
        acks: whatever else the slot holds is returned first (adopted: reserve.lua says why).
        Without it (the caller's jobs are running), a reserve call whose reply was lost
        leaves ``lost_reply`` set: the caller adopts with a later call, once it holds
        nothing. Queues whose key is not a list are skipped and named in ``bad_queues``."""
        self._settle()
        if self._taken:  # handed over by the last call and not run yet: run these first
            taken, self._taken = self._taken, []
            self.bad_queues, self.checked_all = [], False
            return taken
        got = self._take(self._send_reserve(n, landing_queue, adopt))
        if adopt:
            self.lost_reply = False
        return got

    def reserve_landed(self) -> None:
        """After ``block()`` landed a job: send the reserve call that moves it from that
        queue's landing list into the reserved zset, without waiting. The worker runs the job
        meanwhile and calls ``claim`` before it acks or fails it."""
        self._settle()
        self._sent = self._send_reserve(1, self._landing_queue)

    def claim(self, payload: bytes, succeeded: bool) -> Reservation | None:
        """The reservation of a job started from ``block()``'s reply (None if it is not to be
        had: then the job will be handed out again, and a job that succeeded is acked
        instead of run when that happens). Never raises; errors are logged."""
        try:
            self._settle()
        except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError) as e:
            if succeeded:
                self._finished.append(payload)
                del self._finished[:-FINISHED_KEPT]
            log.warning("the reservation of a job started as it landed was not confirmed "
                        "(%s); %s", e, "it is acked when handed back" if succeeded
                        else "it will run again")
            return None
        for i, res in enumerate(self._taken):
            if res.payload == payload:
                return self._taken.pop(i)
        log.warning("a job started as it landed had lost its reservation (recovered after a "
                    "lease expiry); it may run again")
        return None

    def _settle(self) -> None:
        """Read the reply of a reserve call sent ahead, so the connection is in step."""
        if self._sent is not None:
            sent, self._sent = self._sent, None
            self._taken.extend(self._take(sent))

    def _send_reserve(self, n: int, landing_queue: str | None,
                      adopt: bool = True) -> "_Sent":
        landing_queue = landing_queue or self._landing_queue
        keys = [self.reserved_key, self.landings[landing_queue], self.keys.masters,
                self.keys.paused, *self.queue_keys]
        if self._unread:
            # First, so an ack sent ahead that Redis refused rides in this call: the script
            # would otherwise take its job for a lost one and hand it over again.
            self._read_acks()
        self._run_again()  # (a job's end refused or lost: the same, for a job of a task)
        acks, self._acks = self._acks, []
        args = [n, len(self.queues), landing_queue, self.identity, int(adopt), len(acks),
                *acks, *self.queues,
                *fetch_orders(self.queues, self.weighted, self.strict, n, self.rng)]
        sent = _Sent(n, keys, args, acks)
        try:
            conn = self._connection()
            if self.finishes.pending:  # (before it, so their jobs are not adopted by it)
                ahead = self._finish_commands()
                sent = sent._replace(ahead=len(ahead))
                conn.send_packed_command(conn.pack_commands(
                    [*ahead, RESERVE.command(keys, args)]))
            else:
                conn.send_packed_command(conn.pack_command(*RESERVE.command(keys, args)))
        except BaseException:
            self._unsent(sent)
            raise
        return sent

    def _take(self, sent: "_Sent") -> list[Reservation]:
        """Read the reply of ``sent`` (sending it again as EVAL if Redis lost the script)."""
        try:
            try:
                conn = self._connection()
                if sent.ahead:
                    self._read_unread(conn, sent.ahead)
                reply = conn.read_response()
            except redis.exceptions.NoScriptError:
                reply = self._call(*RESERVE.eval_command(sent.keys, sent.args), with_acks=False)
        except BaseException as e:
            if isinstance(e, (redis.ConnectionError, redis.TimeoutError, OSError)):
                self.reset_connection()
                self.lost_reply = True  # the call may have run: its jobs are in the zset
            self._unsent(sent)
            raise
        # One flat array (reserve.lua's header): {acked, adopted, landed, registered, nbad,
        # npaused, member..., bad..., paused...}
        acked, adopted, landed, registered, nbad, npaused = reply[:6]
        names = len(reply) - nbad - npaused
        self._acked(len(sent.acks), acked)
        self.bad_queues = [q.decode("utf-8", "replace") for q in reply[names:names + nbad]]
        self.registered = bool(registered)
        self.paused = [q.decode("utf-8", "replace") for q in reply[names + nbad:]]
        members = reply[6:names]
        self.checked_all = self.registered and len(members) < sent.n
        if adopted:
            log.warning("%d job(s) reserved by a call whose reply was lost (the connection "
                        "broke) are run now", adopted)
        got = [Reservation(m, *split_member(m)) for m in members]
        if adopted and self._again:
            # A finish sent in this call's write and refused (NOSCRIPT) left its jobs reserved
            # (they ran and succeeded); they are not run again: their ends are run again.
            ending = {item.member for e in self._again if e.call for item in e.call.items}
            got = [r for r in got[:adopted] if r.member not in ending] + got[adopted:]
        if self._finished:
            # Only a job the slot held before this call (adopted), or one still in the landing
            # list (the lost call never ran), can be the lost one; and after this call it
            # never comes back (another master recovered it), so it is forgotten. Matched
            # against every reservation by its bytes, a stale entry acked a later
            # byte-identical job without running it.
            held = adopted + landed
            got = [res for res in got[:held] if not self._done_already(res)] + got[held:]
            self._finished.clear()
        return got

    def _unsent(self, sent: "_Sent") -> None:
        """A reserve call that failed, or whose reply is unknown: its acks go out again."""
        if sent.acks:
            self._acks = sent.acks + self._acks
            self._acks_uncertain = True

    def _done_already(self, res: Reservation) -> bool:
        """A job that ran to success while its reservation reply was lost: ack, do not run."""
        try:
            self._finished.remove(res.payload)
        except ValueError:
            return False
        self._acks.append(res.member)
        return True

    def block(self, queue: str | None = None, after_send=None) -> bytes | None:
        """Wait for a job on ``queue`` (by default this slot's own); the payload that landed,
        or None (the block timed out, or the master woke us: a job is on another queue).
        BLMOVE keeps it in Redis (the slot's landing list for that queue) the whole time, so
        nothing is lost if the worker dies now. ``after_send``: see ``_call``."""
        q = self._landing_queue = queue or self.block_queue
        return self._call("BLMOVE", self.keys.queue(q), self.landings[q], "RIGHT", "LEFT",
                          self.block_seconds, after_send=after_send)

    def wait(self, after_send=None) -> None:
        """Wait without taking anything (every queue of this worker is paused), as long as a
        block would, on a list nobody pushes to: the master wakes us (CLIENT UNBLOCK) when
        the pauses change."""
        self._call("BLPOP", self.idle_key, self.block_seconds, after_send=after_send)

    def ack(self, res: Reservation) -> None:
        """Mark a job finished; its ZREM goes out with the next call on this connection."""
        self._acks.append(res.member)

    def ack_members(self, members: list[bytes]) -> None:
        """``ack`` for jobs other threads finished (sharedends.py)."""
        self._acks.extend(members)

    def flush(self) -> None:
        """Send pending acks now (before the worker exits or blocks)."""
        self._settle()
        self._run_again()
        if self._acks or self._unread or self.finishes.pending:
            conn = self._connection()
            try:
                commands = self._finish_commands()
                if self._acks:
                    commands.append(("ZREM", self.reserved_key, *self._acks))
                    self._unread.append(self._acks)
                    self._acks = []
                if commands:
                    conn.send_packed_command(conn.pack_commands(commands))
                self._read_unread(conn)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                self.reset_connection()
                raise

    def fail(self, res: Reservation, kind: str, score: float, payload: str | bytes,
             queue: str = "", task: Move | None = None) -> int:
        """End a reservation other than with an ack, atomically: a failed job to retry or
        dead (or dropped), a released one to later or to its ``queue``, a job of a task with
        its move there (failure_call). WRITTEN, GONE or REFUSED (see there)."""
        keys, args = failure_call(self.keys, self.reserved_key, res.member, kind, score,
                                  payload, self.dead_timeout, self.dead_max_jobs, queue, task)
        return int(self._script(FAIL, keys, args))

    def finish_ahead(self, res: Reservation, task: Move, msg: dict) -> None:
        """A job of a task succeeded: its ack and its state in the task go out with the acks
        (finishes.py)."""
        self.finishes.add(res.member, task, msg, res.queue)

    def finish_members(self, items: list) -> None:
        """``finish_ahead`` for jobs other threads ended (sharedends.py): (reservation, move,
        msg) each."""
        for res, task, msg in items:
            self.finishes.add(res.member, task, msg, res.queue)

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

    def renew_lease(self, lease_key: str, lease_ms: int) -> bool:
        """Extend this worker's master's lease (a job's touch): True if it still had one.
        XX: a lease already expired (and maybe reaped) is not brought back."""
        return self._call("SET", lease_key, "1", "PX", lease_ms, "XX") is not None

    def close(self) -> None:
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - closing after Redis went away: the master recovers
            pass
        if self._conn is not None:
            self._conn.disconnect()
            self._conn = None
