"""Periodic jobs in the master: each schedule pushed once per tick, whatever the number of masters.

No leader: every master computes the same ticks (queued/periodic.py) and, when one falls due,
offers it to queued/lua/cron_enqueue.lua, which claims the tick and pushes the job in one step.
Any number of masters racing produce one job per tick; a leader change, a master killed or
restarted within the tick changes nothing, because there is no state outside Redis to hand
over. The master loop sleeps until the next tick (``due_in`` is one of its select timeouts),
so a job is pushed within milliseconds of its tick.

A tick is pushed late (Redis away, every master down across it) up to ``LATE_LIMIT`` seconds
after its time; a later one is missed, unless the schedule says ``catch_up: true``, which
pushes the latest missed tick (one job, however many were missed) when a master can.

Ticks are computed from this host's clock but judged by Redis's (cron_enqueue.lua refuses a
tick ahead of it): a master whose clock is fast learns by how much from the refusal, warns
naming the host, and follows Redis's clock from then on; when its clock is corrected (it goes
back) it drops that and plans again from the corrected time (issue 16.1.6: one fast master
used to stop every master's pushes for as long as it was fast).

This module owns the definitions in Redis (cron_sync.lua, at the first tick of each master's
life); the status is the operator's (admin/cron.py), the times cron_enqueue.lua's.
"""
from __future__ import annotations

import logging
import socket
import time
from typing import Callable

import redis

from .. import payload as codec
from ..errors import ConfigError
from ..jobregistry import registry
from ..keys import Keys
from ..middleware import client_middleware
from ..periodic import CRON_FIELD, Schedule, declared, enqueue, message, stamp
from ..values import error
from .scripts import CRON_SYNC

log = logging.getLogger("queued.periodic")

#: A tick is still pushed this long after its time (seconds); older ones are missed (sidekiq-
#: cron's 60 s: a deploy that restarts every master across a tick still runs it).
LATE_LIMIT = 60.0
#: After a Redis error, the next try waits this long (seconds); the master logs the outage.
RETRY = 1.0
#: A clock that goes back by more than this (seconds) was corrected: the plan is made again.
JUMP = 1.0
#: A host clock found ahead of Redis's is logged at most this often (seconds).
SKEW_LOG_EVERY = 600.0


# --- which schedules --------------------------------------------------------------------------

def schedules_for(config) -> list[Schedule]:
    """The file's schedules and those declared with @queued.periodic (after -r imports), the
    ones whose ``rails_env`` names another environment left out. A name given by both is an
    error: which definition would win is not something to leave to the import order."""
    source = config.config_file or "config"
    found: dict[str, Schedule] = {}
    for s in (*config.schedules, *declared.values()):
        if s.name in found:
            raise error(f"{source}: {found[s.name].where}: schedule {s.name!r} is also declared "
                        f"{s.where}; rename one (name=...)")
        found[s.name] = s
    env = config.environment
    return [s for s in found.values() if not s.rails_env or env in s.rails_env]


def served(config, queue: str) -> bool:
    return not config.serve_no_jobs and queue in config.queue_names


def queue_of(s: Schedule) -> str:
    cls = registry.lookup(s.klass)
    return s.queue or (cls.get_options()["queue"] if cls is not None else "default")


def check(config) -> None:
    """Refuse to start with a schedule this process would push and then fail: its class is not
    a job class here while its queue is one this process serves (a typo, or a job file not
    given to -r). A class named for a queue served elsewhere (a Ruby Sidekiq's, another
    fleet's) is fine: queued pushes the job and whoever serves that queue runs it."""
    source = config.config_file or "config"
    for s in schedules_for(config):
        queue = queue_of(s)
        if registry.lookup(s.klass) is None and served(config, queue):
            where = s.where if s.where.startswith("@") else f"{source}: {s.where}.class"
            known = ", ".join(registry.names()) or "none"
            raise ConfigError(
                f"{where}: {s.klass!r} is not a job class of this process "
                f"(registered: {known}) and its queue {queue!r} is served here, so every job "
                "it pushes would fail; fix the name, load its code with -r, or set queue: to "
                "the queue of the process that runs it")


def active(config) -> list[Schedule]:
    """The schedules this master pushes (sidekiq-scheduler's enabled: false and
    listened_queues_only: true honoured)."""
    options = config.scheduler
    if options is not None and not options.enabled:
        return []
    schedules = schedules_for(config)
    if options is not None and options.listened_queues_only:
        schedules = [s for s in schedules if served(config, queue_of(s))]
    return schedules


# --- the master's part ------------------------------------------------------------------------

class Periodic:
    def __init__(self, r, keys: Keys, config, clock: Callable[[], float] = time.time):
        self.r = r
        self.keys = keys
        self.clock = clock
        self.schedules = active(config)
        self.templates = {s.name: message(s, registry.lookup(s.klass)) for s in self.schedules}
        self.next_at: dict[str, float] = {}   # wall-clock epoch of each schedule's next tick
        self.synced = False
        self.retry_at = 0.0
        #: seconds this host's clock is ahead of Redis's, learned from a refused tick
        self.skew = 0.0
        self.seen = float("-inf")  # the latest now() handed out
        self.skew_logged = float("-inf")  # (monotonic)
        #: client middleware (a frozen copy while a HUP's new code loads: server/loader.py)
        self.chain = client_middleware

    def due_in(self) -> float | None:
        """Seconds until this master has periodic work (None: no schedules)."""
        if not self.schedules:
            return None
        now = self.now()
        soonest = min(self.next_at.values()) if self.synced else now
        return max(0.0, max(soonest, self.retry_at) - now)

    def backoff(self) -> None:
        self.retry_at = self.now() + RETRY

    def now(self) -> float:
        """The time ticks are computed from: this host's clock, less the skew a refused tick
        showed. A clock that went back (corrected) is taken as it is again, and every
        schedule's next look planned anew from it (else it waited for the old plan)."""
        now = self.clock() - self.skew
        if now < self.seen - JUMP:
            if self.skew:
                log.info("this host's clock went back; periodic ticks follow it again (it was "
                         "%.1fs ahead of Redis's)", self.skew)
                self.skew, now = 0.0, self.clock()
            self._replan(now)
        self.seen = now
        return now

    def _replan(self, now: float) -> None:
        """Each schedule's next look at once, at its latest tick as of ``now``."""
        if self.synced:
            for s in self.schedules:
                self.next_at[s.name] = s.timing.latest(now)

    def tick(self) -> None:
        """Push what is due. Redis errors go to the caller (the master logs them once)."""
        if not self.schedules:
            return
        now = self.now()
        if now < self.retry_at:
            return
        if not self.synced:
            self.sync(now)
        for s in self.schedules:
            if now >= self.next_at[s.name]:
                try:
                    if not self._fire(s, now):
                        return  # (planned again from Redis's clock: looked at on the next turn)
                except (redis.RedisError, OSError):
                    raise
                except Exception:  # noqa: BLE001 - one broken schedule must not stop the master
                    log.exception("schedule %s: its tick could not be pushed", s.name)
                self.next_at[s.name] = s.timing.next_after(now)

    def sync(self, now: float) -> None:
        """Write every definition (cron_sync.lua) and plan each schedule's first look: its
        latest tick, at once (pushed if within LATE_LIMIT, or catch_up, and not pushed yet)."""
        for s in self.schedules:
            latest = s.timing.latest(now)
            status, last = CRON_SYNC(self.r, [self.keys.cron_job(s.name), self.keys.cron_jobs],
                                     [self.keys.cron_member(s.name),
                                      "enabled" if s.enabled else "disabled", repr(latest),
                                      *self._fields(s)])
            self.next_at[s.name] = latest
            log.info("schedule %s: %s %s (%s) -> %s on queue %s (%s)", s.name,
                     "cron" if s.timing.kind == "cron" else "every", s.timing.text,
                     s.timing.zone_note(), s.klass, self.templates[s.name]["queue"],
                     status.decode())
        self.synced = True

    def _fields(self, s: Schedule) -> list[str]:
        """sidekiq-cron's hash fields (its Web UI reads them), and queued's own."""
        template = self.templates[s.name]
        fields = {"name": s.name, "klass": s.klass, "cron": s.timing.cron_text(),
                  "description": s.description, "args": codec.dumps(list(s.args)),
                  "message": codec.dumps(template), "active_job": "false",
                  "queue_name_prefix": "", "queue_name_delimiter": "",
                  "symbolize_args": "false", "date_as_argument": "false",
                  "queued_timing": s.timing.text, "queued_kind": s.timing.kind,
                  "queued_catch_up": "true" if s.catch_up else "false",
                  "queued_metadata": "true" if s.include_metadata else "false",
                  "queued_where": s.where}
        return [x for pair in fields.items() for x in pair]

    def _fire(self, s: Schedule, now: float) -> bool:
        """Offer the schedule's latest tick; False if it was ahead of Redis's clock (the
        plan is made again from Redis's)."""
        tick = s.timing.latest(now)
        late = now - tick
        if late > LATE_LIMIT and not s.catch_up:
            log.debug("schedule %s: tick %s is %.0fs old; not pushed (catch_up is off)",
                      s.name, tick, late)
            return True
        msg = stamp(self.templates[s.name], s.name, tick, now, codec.new_jid(),
                    metadata=s.include_metadata)
        msg = self._through_middleware(msg)
        if msg is None:
            return True
        answer = enqueue(self.r, self.keys, s.name, msg, now, tick)
        if answer == "ahead":
            self._ahead(s, tick)
            return False
        if answer == "enqueued":
            log.info("schedule %s: pushed %s jid=%s to %s for its tick %s (%.3fs late)",
                     s.name, msg["class"], msg["jid"], msg["queue"],
                     time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(tick)), late)
        elif answer == "missing":  # someone deleted the hash: write it again, push next time
            log.warning("schedule %s: its record cron_job:%s was gone; written again",
                        s.name, s.name)
            self.synced = False
        elif answer == "wrongtype":
            log.error("schedule %s: queue key %s holds another Redis type, not a list; its "
                      "tick was not pushed", s.name, self.keys.queue(msg["queue"]))
        return True

    def _ahead(self, s: Schedule, tick: float) -> None:
        """A tick refused as ahead of Redis's clock: this host's clock is fast. Learn by how
        much (Redis's TIME), say so naming the host, and plan again from Redis's time."""
        secs, micros = self.r.time()
        redis_now = secs + micros / 1e6
        self.skew = self.clock() - redis_now
        self.seen = redis_now
        self._replan(redis_now)
        if time.monotonic() - self.skew_logged >= SKEW_LOG_EVERY:
            self.skew_logged = time.monotonic()
            log.warning("schedule %s: this host's clock (host %s) is %.1fs ahead of Redis's; "
                        "its tick %s was refused (ticks are claimed by Redis's clock, which "
                        "every master shares). This master follows Redis's clock until the "
                        "host's is fixed (NTP)", s.name, socket.gethostname(), self.skew,
                        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(tick)))

    def _through_middleware(self, msg: dict) -> dict | None:
        """Client middleware as a push would run it (the scheduler does the same for due
        jobs). Every master racing for a tick runs it; one push lands."""
        if not len(self.chain):
            return msg
        try:
            reached = self.chain.reaches_end(msg["class"], msg, msg["queue"])
        except Exception:  # noqa: BLE001 - a broken middleware must not stop the schedules
            log.exception("client middleware raised on periodic job %s; pushed as it was",
                          msg.get(CRON_FIELD))
            return msg
        return msg if reached else None
