"""Reliable fetch, the worker's side: reserve, block, ack and fail.

A worker slot owns two kinds of keys (keys.py): a reserved zset holding the jobs it has taken,
and one landing list per queue that an idle worker BLMOVEs into. A job is always in a queue,
a landing list, the reserved zset, or (after a failure) retry/dead: never only in memory. So
when the worker dies, the master puts everything the slot holds back (recovery.py).

Round trips are the cost of a job, so one call does two things: it acks the jobs the worker
finished and reserves up to ``batch`` more (reserve.lua). The batch grows while jobs are short
and the queue is deep (see Worker), so a deep queue costs well under one round trip per job.
What else goes out without waiting for its reply (acks before a long job, a task's ends and
marks) is sentahead.py's, with the connection: Fetcher is built on that class.

A job that arrives while the worker is idle is started from BLMOVE's reply: the reserve call
that moves it from the landing list into the reserved zset is sent, and its reply read only
when the job has run (``reserve_landed`` / ``claim``). That is one round trip less between a
push and the job's start. The job is in Redis all along (landing list, then reserved zset).
If the reply is lost (the connection broke while the job ran), a job that succeeded is
remembered and acked when the next reserve hands it back, so it does not run twice.

What a reservation is, and fail.lua's call and replies, are reserved.py's (the master's
recovery uses them too).
"""
from __future__ import annotations

import logging
import random
from typing import NamedTuple, Sequence

import redis

from .reserved import Reservation, failure_call, fetch_orders, split_member
from .scripts import FAIL, RESERVE
from .sentahead import SentAhead
from ..connection import pack_commands
from ..keys import Keys
from ..tracking import Move

log = logging.getLogger("queued.fetch")

#: How many jobs that succeeded while their reservation reply was lost are remembered, to be
#: acked instead of run when a reserve hands them back (one that never comes back, because
#: another master recovered it, must not be kept for ever).
FINISHED_KEPT = 100


class _Sent(NamedTuple):
    n: int
    keys: list
    args: list
    acks: list[bytes]
    ahead: int = 0  # entries of _unread sent in the same write, before it (finishes)


class Fetcher(SentAhead):
    def __init__(self, url: str, keys: Keys, identity: str, slot: int, queues: Sequence[str],
                 weighted: Sequence[str], strict: bool, block_seconds: float,
                 dead_timeout: int, dead_max_jobs: int):
        super().__init__(url, keys, identity, slot, block_seconds, dead_timeout, dead_max_jobs)
        self.identity = identity
        self.queues = tuple(queues)
        self.weighted = tuple(weighted)
        self.strict = strict
        self.block_seconds = block_seconds
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

    # --- the reserve call sent ahead (sentahead.py has the others) ------------------------
    def _settle(self) -> None:
        """Read the reply of a reserve call sent ahead, so the connection is in step."""
        if self._sent is not None:
            sent, self._sent = self._sent, None
            self._taken.extend(self._take(sent))

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
        self._ends_out()
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
                conn.send_packed_command(
                    pack_commands(conn, [*ahead, RESERVE.command(keys, args)]))
            else:
                conn.send_packed_command(pack_commands(conn, [RESERVE.command(keys, args)]))
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

    def fail(self, res: Reservation, kind: str, score: float, payload: str | bytes,
             queue: str = "", task: Move | None = None) -> int:
        """End a reservation other than with an ack, atomically: a failed job to retry or
        dead (or dropped), a released one to later or to its ``queue``, a job of a task with
        its move there (failure_call). WRITTEN, GONE or REFUSED (reserved.py)."""
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

    def renew_lease(self, lease_key: str, lease_ms: int) -> bool:
        """Extend this worker's master's lease (a job's touch): True if it still had one.
        XX: a lease already expired (and maybe reaped) is not brought back."""
        # (without the pending acks: this runs inside a job (ops.touch), where writing their
        # done lines first (before_ends) waited on the log under the job's time limit and
        # the logging handler's lock, which a thread of the job's may hold: RT13)
        return self._call("SET", lease_key, "1", "PX", lease_ms, "XX",
                          with_acks=False) is not None

