"""The scheduler: moves due jobs from ``retry`` and ``schedule`` to their queues.

Runs in the master loop. One master at a time is the leader (a key with a TTL, renewed each
heartbeat) and polls every ``scheduler_poll_interval`` (50 ms), sleeping less when the next
job is due sooner, so scheduled jobs run within milliseconds of their time while the whole
fleet costs Redis about 20 cheap calls a second. Other masters poll every
``poll_interval_average`` (5 s, jittered like Sidekiq) as a backstop if the leader dies.

A move is two steps that cannot lose a job: ``due.lua`` lists due members (read-only); Python
sets ``enqueued_at`` without re-encoding anything else; ``enqueue_due.lua`` pushes each job
only if its ZREM succeeded, so with many masters each job is moved exactly once.
"""
from __future__ import annotations

import logging
import random
import time

import redis

from . import payload as codec
from .connection import DUE, ENQUEUE_DUE, RENEW_LEADER
from .errors import PayloadError
from .keys import Keys

log = logging.getLogger("queued.scheduler")

#: Jobs moved per round trip.
BATCH = 100


class Scheduler:
    def __init__(self, r: redis.Redis, keys: Keys, identity: str, config):
        self.r = r
        self.keys = keys
        self.identity = identity
        self.config = config
        self.leader = False
        self.next_poll = 0.0  # monotonic

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
        """Poll if it is time; plan the next poll."""
        if now < self.next_poll:
            return
        soonest = self.poll()
        if self.leader:
            wait = self.config.scheduler_poll_interval
            if soonest is not None:
                wait = min(wait, max(0.0, soonest))
        else:
            wait = self.config.poll_interval_average * random.uniform(0.5, 1.5)
        self.next_poll = now + wait

    def poll(self) -> float | None:
        """Move everything due; return seconds until the next known due job, if any."""
        zsets = [self.keys.retry, self.keys.schedule]  # Sidekiq's order
        while True:
            reply = DUE(self.r, zsets, [BATCH])
            now, nxt, i, full = float(reply[0]), reply[1], 2, False
            for zset in zsets:
                count = int(reply[i])
                if count:
                    self._enqueue(zset, reply[i + 1:i + 1 + count], now)
                full = full or count == BATCH
                i += 1 + count
            if not full:
                return None if nxt is None else float(nxt) - now

    def _enqueue(self, zset: str, members: list[bytes], now: float) -> None:
        keys, args = [zset, self.keys.queues, self.keys.dead], [repr(now)]
        for member in members:
            try:
                msg = codec.loads(member)
                queue = msg.get("queue") or "default"
                if not isinstance(queue, str):
                    raise PayloadError(f'"queue" is {type(queue).__name__}, not a string')
                moved = _with_enqueued_at(member, msg, time.time())
            except (PayloadError, ValueError) as e:
                # Sent on as it is, so one bad member can never stop the scheduler.
                log.error("unusable payload in %s sent to dead: %s: %.200r", zset, e, member)
                keys.append(self.keys.dead)
                args += [member, member, ""]
                continue
            keys.append(self.keys.queue(queue))
            args += [member, moved, queue]
        reply = ENQUEUE_DUE(self.r, keys, args)
        for queue in reply[1:]:
            log.error("a due job from %s could not be pushed to queue %s: its key %s holds "
                      "another Redis type, not a list (WRONGTYPE); sent to dead", zset,
                      queue.decode("utf-8", "replace"), self.keys.queue(queue.decode()))


def _with_enqueued_at(raw: bytes, msg: dict, now: float) -> bytes | str:
    """The payload as it will sit in its queue: Sidekiq sets ``enqueued_at`` (and drops an
    ``at`` a hand-written producer left in). When neither key is there, which is the normal
    case for ``schedule``, the new key is appended to the producer's own bytes, so a PHP
    producer's ``\\/`` escapes and spacing survive; otherwise the job is re-encoded the way
    Sidekiq re-encodes it."""
    if "enqueued_at" not in msg and "at" not in msg:
        body = raw.rstrip()[:-1].rstrip()
        sep = b"," if msg else b""
        return body + sep + b'"enqueued_at":' + repr(now).encode() + b"}"
    msg.pop("at", None)
    msg["enqueued_at"] = now
    return codec.dumps(msg)
