"""The waker: a job pushed to a queue that no idle worker waits on starts at once anyway.

An idle worker blocks in ``BLMOVE`` on one queue (fetch.py: the job lands in Redis, never only
in memory), where Sidekiq's ``BRPOP`` waits on all of them. Idle workers share the queues out
(slots.Watch), which covers every queue only while there are as many idle workers as queues.
For the rest the master watches every queue key with client-side caching's broadcast mode:
``CLIENT TRACKING ON REDIRECT <id> BCAST PREFIX <ns>queue:`` makes Redis send one invalidation
message on this master's subscriber connection whenever any queue key changes (a producer's
LPUSH, the scheduler's move, a worker's pop). When it names a queue this master serves that no
idle worker of its own waits on, the master checks that the queue really holds a job (one LLEN:
a pop also invalidates) and wakes one idle worker with ``CLIENT UNBLOCK <its client id>``.
Its BLMOVE returns nil as on a timeout, and its next reserve call takes jobs from every queue
in the configured order, strict or weighted (fetch.py), so the order is kept.

Cost: one message per change of a queue key, read by the master whatever its workers do (a few
microseconds each); one LLEN and one UNBLOCK per wake-up. Nobody polls. Tracking is on only
while some worker waits, or did within TRACK_IDLE_OFF: with every worker busy each one looks at
every queue before it idles, so nothing needs waking, and tracking cost Redis ~4,000
instructions per job (8 % of a no-op job's: every key written is matched against the prefixes,
and every pop sent a message; issue 18). When a worker blocks again it is turned back on and
every queue looked at once (one LLEN each), which finds what was pushed while it was off. Where Redis has no
CLIENT TRACKING (before 6.0, or a proxy or ACL that refuses it) this is off, said once in the
log, and a job on an unwatched queue waits until an idle worker's block times out
(``fetch_timeout``).

Races, and why they are harmless: a worker that became idle after the message arrived tells the
master through the idle pipe (a byte written right after its BLMOVE went out), and the master
looks at the queues it still has pending; an UNBLOCK that finds the worker not blocked yet
(answer 0) is tried again a few milliseconds later; a worker woken for a job another one took
first finds nothing and blocks again. With several masters each may wake one of its workers for
the same job: one takes it.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Sequence

import redis

from ..keys import Keys
from .slots import Watch

log = logging.getLogger("queued.waker")

#: Seconds between attempts to set tracking up again after it failed or broke.
RETRY_SETUP = 5.0
#: Seconds before trying again to wake a worker that was not blocked yet (UNBLOCK said 0).
RETRY_WAKE = 0.002
#: While no worker waits, the messages are read in bulk this often (seconds), so they never
#: pile up in Redis's output buffer (a subscriber too far behind is disconnected).
DRAIN_EVERY = 0.1
#: Tracking goes off once no worker has waited for this long (seconds), and back on when one does.
TRACK_IDLE_OFF = 1.0
_CHANNEL = b"__redis__:invalidate"


class Waker:
    def __init__(self, r: redis.Redis, keys: Keys, queues: Sequence[str], watch: Watch,
                 horizon: float, serves=None):
        self.r = r
        self.keys = keys
        self.queues = tuple(queues)
        self.index = {keys.queue(q): i for i, q in enumerate(self.queues)}
        self.paused_key = keys.paused
        self.paused: set[int] = set()  # indexes of our queues paused now (cached)
        self.pauses_changed = True     # read the paused set at the next step
        self.watch = watch
        #: (slot, queue name) -> whether that slot's worker serves the queue (queue groups)
        self.serves = serves or (lambda slot, queue: True)
        #: A queue stays pending this long at most: by then an idle worker's block timed out
        #: and its reserve looked at every queue anyway (fetch_timeout).
        self.horizon = horizon
        self.pending: dict[int, float] = {}  # queue index -> when to forget it (monotonic)
        self.retry_at: float | None = None   # when to try an UNBLOCK again
        self.sub = None                      # subscriber connection (invalidation messages)
        self.tracker = None                  # the connection whose tracking redirects there
        self.sub_id = 0                      # the subscriber's client id (tracking's REDIRECT)
        self.tracking = False                # tracking on now (see TRACK_IDLE_OFF)
        self.waited_at = 0.0                 # when a worker was last seen waiting (monotonic)
        self.next_setup = 0.0
        self.next_drain = 0.0                # when to read the messages at the latest
        self.unsupported = False
        self.idle_r, self.idle_w = os.pipe()  # workers write a byte here as they block
        os.set_blocking(self.idle_r, False)
        os.set_blocking(self.idle_w, False)

    # --- the connections ----------------------------------------------------------------------
    def fds(self) -> list[int]:
        """What the master's select() waits on for us: the idle pipe; the tracker (it never
        reads, so readable means closed, and a closed tracker means no more messages); and
        the subscriber only while a worker waits (blocked), the only time a message needs an
        answer at once. Under load every reserve changes a queue key, a message each: woken
        by each, the master spent ~18 us of CPU per job. Otherwise the messages are read in
        bulk every DRAIN_EVERY seconds (due_in), and when a worker says it blocks."""
        fds = [self.idle_r]
        if self.tracker is not None and self.tracker._sock is not None:
            fds.append(self.tracker._sock.fileno())
        if self.sub is not None and self.sub._sock is not None and self.watch.blocked():
            fds.append(self.sub._sock.fileno())
        return fds

    def due_in(self, now: float) -> float | None:
        """Seconds until we need the loop again without any fd becoming readable."""
        times = [t for t in (self.retry_at,
                             None if self.sub or self.unsupported else self.next_setup,
                             self.next_drain if self.sub else None)
                 if t is not None]
        return max(0.0, min(times) - now) if times else None

    def _setup(self, now: float) -> None:
        if self.sub is not None or self.unsupported or now < self.next_setup:
            return
        sub, tracker = self._connection(), self._connection()
        try:
            sub.connect()
            sub.send_command("CLIENT", "ID")
            self.sub_id = sub.read_response()
            sub.send_command("SUBSCRIBE", _CHANNEL)
            sub.read_response()
            tracker.connect()
            self._tracking_on(tracker)
        except redis.ResponseError as e:
            sub.disconnect()
            tracker.disconnect()
            self.unsupported = True
            log.warning("Redis refused CLIENT TRACKING (%s): a job pushed to a queue no idle "
                        "worker waits on starts within fetch_timeout instead of at once", e)
            return
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            sub.disconnect()
            tracker.disconnect()
            self.next_setup = now + RETRY_SETUP  # Redis is away: the master says so already
            return
        self.sub, self.tracker = sub, tracker
        self.tracking, self.waited_at = True, now
        # Whatever was pushed while we were not watching: look at every queue once.
        self._all_pending(now)

    def _tracking_on(self, tracker) -> None:
        tracker.send_command("CLIENT", "TRACKING", "ON", "REDIRECT", self.sub_id, "BCAST",
                             "PREFIX", self.keys.queue(""), "PREFIX", self.paused_key)
        tracker.read_response()

    def _switch(self, now: float) -> bool:
        """Tracking on while a worker waits or did within TRACK_IDLE_OFF, else off. Turned
        on, every queue is looked at once and the paused set read again (what changed while
        it was off: no message told us); True then, as news."""
        if self.sub is None:
            return False
        if self.watch.blocked():
            self.waited_at = now
        want = now - self.waited_at < TRACK_IDLE_OFF
        if want == self.tracking:
            return False
        try:
            if want:
                self._tracking_on(self.tracker)
            else:
                self.tracker.send_command("CLIENT", "TRACKING", "OFF")
                self.tracker.read_response()
        except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError):
            self._drop(now)
            self._all_pending(now)
            return True
        self.tracking = want
        if want:
            self._all_pending(now)
            self.pauses_changed = True
        return want

    def _connection(self):
        """A connection with the master's settings (address, auth, TLS), speaking RESP2:
        there an invalidation message is an ordinary pub/sub message on the subscriber, read
        like any reply; under RESP3 (redis-py 8's default) the parser hands pushes to
        callbacks instead. redis-py before 5 speaks only RESP2 and takes no ``protocol``."""
        pool = self.r.connection_pool
        try:
            return pool.connection_class(**{**pool.connection_kwargs, "protocol": 2})
        except TypeError:
            return pool.connection_class(**pool.connection_kwargs)

    def _drop(self, now: float) -> None:
        for conn in (self.sub, self.tracker):
            if conn is not None:
                conn.disconnect()
        self.sub = self.tracker = None
        self.tracking = False
        self.next_setup = now + RETRY_SETUP

    def close(self) -> None:
        self._drop(time.monotonic())
        for fd in (self.idle_r, self.idle_w):
            os.close(fd)

    # --- the loop's step ----------------------------------------------------------------------
    def step(self, wake: bool = True, now: float | None = None) -> None:
        """Read what arrived (messages, idle workers), then wake workers for pending queues
        (unless ``wake`` is false: a quiet master's workers take nothing new). Called on every
        turn of the master's loop; cheap when nothing happened."""
        now = time.monotonic() if now is None else now
        self._setup(now)
        idle_news = self._drain_idle()
        news = self._read_messages(now)
        news = self._switch(now) or news
        if self.pauses_changed:
            try:
                self._pauses(wake)
            except (redis.RedisError, OSError):
                pass  # read again at the next step
        if not wake:
            self.pending.clear()
        elif self.pending and (news or idle_news
                               or (self.retry_at is not None and now >= self.retry_at)):
            self.retry_at = None
            try:
                self._wake(now)
            except (redis.RedisError, OSError):
                pass  # the master's own Redis steps notice and log an outage

    def _drain_idle(self) -> bool:
        try:
            return bool(os.read(self.idle_r, 4096))
        except BlockingIOError:
            return False

    def _read_messages(self, now: float) -> bool:
        if self.sub is None:
            return False
        self.next_drain = now + DRAIN_EVERY
        got = False
        try:
            while self.sub.can_read(timeout=0):
                got = self._message(self.sub.read_response(), now) or got
            if self.tracker.can_read(timeout=0):
                self.tracker.read_response()  # raises: it was closed (a server timeout)
        except (redis.ConnectionError, redis.TimeoutError, OSError, redis.ResponseError):
            self._drop(now)
            self._all_pending(now)
            return True
        return got

    def _message(self, msg, now: float) -> bool:
        if not (isinstance(msg, list) and len(msg) == 3 and msg[0] == b"message"
                and msg[1] == _CHANNEL):
            return False
        keys = msg[2]
        if keys is None:  # FLUSHALL / FLUSHDB, or tracking reset: anything may have changed
            self._all_pending(now)
            self.pauses_changed = True
            return True
        got = False
        for key in keys:
            name = key.decode("utf-8", "replace")
            if name == self.paused_key:
                self.pauses_changed = True
                continue
            i = self.index.get(name)
            if i is not None:
                self.pending.setdefault(i, now + self.horizon)
                got = True
        return got

    def _pauses(self, wake: bool) -> None:
        """The paused set changed: read it, and wake every blocked worker, so one waiting on a
        queue paused now leaves it and one waiting on none (all its queues were paused) looks
        again: a pause or unpause takes effect within one fetch round."""
        names = {n.decode("utf-8", "replace") for n in self.r.smembers(self.paused_key)}
        self.pauses_changed = False
        paused = {i for i, q in enumerate(self.queues) if q in names}
        if paused != self.paused:
            log.info("paused queues now: %s", ", ".join(self.queues[i] for i in sorted(paused))
                     or "none")
            if wake:
                for slot, (_, client_id) in self.watch.blocked().items():
                    self.r.client_unblock(client_id)
        self.paused = paused

    def _all_pending(self, now: float) -> None:
        for i in range(len(self.queues)):
            self.pending.setdefault(i, now + self.horizon)

    def _wake(self, now: float) -> None:
        for i, until in list(self.pending.items()):
            if now >= until:
                del self.pending[i]
        blocked = self.watch.blocked()
        if not blocked or not self.pending:
            return  # every worker is busy: each one looks at every queue before it idles
        watched = {q for q, _ in blocked.values()}
        for i in [i for i in self.pending if i in watched or i in self.paused]:
            del self.pending[i]  # its worker's BLMOVE takes the job, or nobody may
        candidates = sorted(self.pending)
        if not candidates:
            return
        pipe = self.r.pipeline(transaction=False)
        for i in candidates:
            pipe.llen(self.keys.queue(self.queues[i]))
        waiting = [i for i, n in zip(candidates, pipe.execute()) if n]
        for i in set(candidates) - set(waiting):
            del self.pending[i]  # emptied already (a pop, or someone took it)
        # Wake the workers waiting on the least wanted queues first (the last in the
        # configured order), so the queues that matter most stay watched; a worker of a
        # group wakes only for a queue of its group.
        sleepers = sorted(blocked.items(), key=lambda kv: -kv[1][0])
        for i in waiting:
            found = next((s for s in sleepers if self.serves(s[0], self.queues[i])), None)
            if found is None:
                continue  # every idle worker that serves it is busy: it looks before it idles
            sleepers.remove(found)
            slot, (watched_queue, client_id) = found
            if self.r.client_unblock(client_id):
                del self.pending[i]
                log.debug("a job on queue %s: woke worker %d (waiting on %s)", self.queues[i],
                          slot, self.queues[watched_queue] if watched_queue < len(self.queues)
                          else "no queue")
            else:
                self.retry_at = now + RETRY_WAKE  # not blocked yet: again in a moment
