"""The scheduler: moves due jobs from ``retry`` and ``schedule`` to their queues.

Runs in the master loop. One master at a time is the leader (a key with a TTL, renewed each
heartbeat) and polls every ``scheduler_poll_interval`` (50 ms), sleeping less when the next
job is due sooner, so scheduled jobs run within milliseconds of their time while the whole
fleet costs Redis about 20 cheap calls a second. Other masters poll every
``poll_interval_average`` (5 s, jittered like Sidekiq) as a backstop if the leader dies.

A move is two steps that cannot lose a job: ``due.lua`` lists due members (read-only); Python
sets ``enqueued_at`` without re-encoding anything else; ``enqueue_due.lua`` pushes each job
only if its ZREM succeeded, so with many masters each job is moved exactly once.

When client middleware is configured, each due job goes through it on its way to the queue,
as Sidekiq 6.4's poller pushes due jobs through ``Client.push``: a middleware may change the
job or cancel it (then it is dropped, as in Sidekiq). Without middleware, the producer's bytes
are kept.

A backlog of due jobs is moved in slices of ``SLICE`` jobs, one slice per turn of the master's
loop. Moving everything at once (about 43,000 jobs a second here) froze the loop: with 200,000
due jobs the master renewed no lease for seconds, and another master took back its running
jobs, which then ran twice.
"""
from __future__ import annotations

import logging
import random
import time

import redis

from .. import payload as codec
from .scripts import DUE, ENQUEUE_DUE, RENEW_LEADER
from ..errors import PayloadError
from ..keys import Keys
from ..middleware import client_middleware

log = logging.getLogger("queued.scheduler")

#: Jobs moved per round trip.
BATCH = 100
#: Most jobs moved in one turn of the master's loop (about 25 ms of work here).
SLICE = 1000
#: A key of the wrong type, or jobs that cannot be moved, are logged at most this often (s).
REPORT_INTERVAL = 60.0


class Scheduler:
    def __init__(self, r: redis.Redis, keys: Keys, identity: str, config):
        self.r = r
        self.keys = keys
        self.identity = identity
        self.config = config
        self.leader = False
        self.next_poll = 0.0  # monotonic
        self._reported: dict[str, float] = {}  # what was last logged when (REPORT_INTERVAL)
        #: client middleware (a frozen copy while a HUP's new code loads: server/loader.py)
        self.chain = client_middleware

    def elect(self) -> None:
        """Take or keep leadership; called on every heartbeat."""
        ttl_ms = int(self.config.heartbeat_interval * 3 * 1000)
        was = self.leader
        self.leader = RENEW_LEADER(self.r, [self.keys.scheduler_leader],
                                   [self.identity, ttl_ms]) == 1
        if self.leader and not was:
            self.next_poll = 0.0  # a backstop poll may have been planned seconds ahead
            log.info("this master now runs the scheduler (polling every %gs)",
                     self.config.scheduler_poll_interval)

    def resign(self) -> None:
        if self.leader:
            RENEW_LEADER(self.r, [self.keys.scheduler_leader], [self.identity, 1])
            self.leader = False

    def due_in(self, now: float) -> float:
        return max(0.0, self.next_poll - now)

    def tick(self, now: float) -> None:
        """Poll if it is time; plan the next poll (at once while a backlog is left)."""
        if now < self.next_poll:
            return
        soonest, more = self.poll()
        if more:
            wait = 0.0
        elif self.leader:
            wait = self.config.scheduler_poll_interval
            if soonest is not None:
                wait = min(wait, max(0.0, soonest))
        else:
            wait = self.config.poll_interval_average * random.uniform(0.5, 1.5)
        self.next_poll = now + wait

    def poll(self, limit: int | None = None) -> tuple[float | None, bool]:
        """Move what is due, up to about ``limit`` (SLICE) jobs. Returns (seconds until the
        next known due job, if any; whether due jobs were left for the next slice)."""
        limit = limit or SLICE
        zsets = [self.keys.retry, self.keys.schedule]  # Sidekiq's order
        skip = dict.fromkeys(zsets, 0)  # due members left in place this round (unmovable)
        seen = 0
        while True:
            reply = DUE(self.r, zsets, [BATCH, *skip.values()])
            now, nxt, i, full = float(reply[0]), reply[1], 3, False
            for key in reply[2]:
                self._report(key.decode(), "key %s holds another Redis type, not a sorted set "
                             "(WRONGTYPE); its due jobs wait until it is fixed; serving the "
                             "others", key.decode())
            for zset in zsets:
                count = int(reply[i])
                if count:
                    skip[zset] += self._enqueue(zset, reply[i + 1:i + 1 + count], now)
                full = full or count == BATCH
                seen += count
                i += 1 + count
            if not full:
                return (None if nxt is None else float(nxt) - now), False
            if seen >= limit:
                return None, True

    def _enqueue(self, zset: str, members: list[bytes], now: float) -> int:
        """Move ``members`` out of ``zset``; returns how many had to stay (no usable
        destination: their queue key and dead both hold another Redis type)."""
        keys, args = [zset, self.keys.queues, self.keys.dead], [repr(now)]
        for member in members:
            action, payload, queue = self._destination(zset, member, now)
            keys.append(self.keys.queue(queue) if action == "push" else self.keys.dead)
            args += [member, payload, action, queue]
        moved, to_dead, left = ENQUEUE_DUE(self.r, keys, args)
        log.debug("moved %d due job(s) from %s", moved, zset)
        for queue in to_dead:
            log.error("a due job from %s could not be pushed to queue %s: its key %s holds "
                      "another Redis type, not a list (WRONGTYPE); sent to dead", zset,
                      queue.decode("utf-8", "replace"), self.keys.queue(queue.decode()))
        if left:
            self._report(f"left:{zset}", "%d due job(s) in %s can go neither to their queue nor "
                         "to %s (both hold another Redis type); they stay due until fixed",
                         left, zset, self.keys.dead)
        return int(left)

    def _destination(self, zset: str, member: bytes, now: float) -> tuple[str, bytes | str, str]:
        """(action, payload, queue) for one due member: see enqueue_due.lua's actions."""
        try:
            msg = codec.loads(member)
            queue = codec.queue_of(msg)  # ("" or null: no queue, never "default": F4 #3)
            if queue is None:
                raise PayloadError(codec.no_queue(msg))
            if len(self.chain):
                return self._through_middleware(member, msg, queue, now)
            return "push", _with_enqueued_at(member, msg, time.time()), queue
        except (PayloadError, ValueError) as e:
            # Sent on as it is, so one bad member can never stop the scheduler.
            log.error("unusable payload in %s sent to dead: %s: %.200r", zset, e, member)
            return "dead", member, ""

    def _through_middleware(self, member: bytes, msg: dict, queue: str,
                            now: float) -> tuple[str, bytes | str, str]:
        try:
            reached = self.chain.reaches_end(msg.get("class"), msg, queue)
        except Exception:  # noqa: BLE001 - a broken middleware must not stop the scheduler
            log.exception("client middleware raised on a due job (jid=%s); enqueued as it was",
                          msg.get("jid"))
            return "push", _with_enqueued_at(member, codec.loads(member), time.time()), queue
        if not reached:
            return "drop", b"", queue
        queue = msg.get("queue") if isinstance(msg.get("queue"), str) and msg["queue"] else queue
        msg.pop("at", None)
        msg["enqueued_at"] = time.time()
        return "push", codec.dumps(msg), queue

    def _report(self, what: str, message: str, *args) -> None:
        now = time.monotonic()
        if now - self._reported.get(what, -REPORT_INTERVAL) >= REPORT_INTERVAL:
            self._reported[what] = now
            log.error(message, *args)


def _with_enqueued_at(raw: bytes, msg: dict, now: float) -> bytes | str:
    """The payload as it will sit in its queue: Sidekiq sets ``enqueued_at`` (and drops an
    ``at`` a hand-written producer left in). When neither key is there, which is the normal
    case for ``schedule``, the new key is appended to the producer's own bytes
    (payload.with_field); otherwise the job is re-encoded the way Sidekiq re-encodes it."""
    if "at" not in msg:
        return codec.with_field(raw, msg, "enqueued_at", now)
    msg = dict(msg)
    msg.pop("at")
    msg["enqueued_at"] = now
    return codec.dumps(msg)
