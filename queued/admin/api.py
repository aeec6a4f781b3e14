"""The operator's Python API (``queued.api``): what Sidekiq's ``api.rb`` gives, for Python, on
the same Redis the Ruby side uses, Sidekiq's own processes included.

    from queued import api
    admin = api.Admin(url="redis://...")            # or api.Admin(redis_client, namespace=...)
    admin.stats()                                   # Sidekiq::Stats' numbers
    admin.queue("default").latency()
    admin.dead.retry_all(api.Filter.of(klass="Billing::InvoiceJob", error="Timeout"))
    for p in admin.processes(): p.quiet()

Reads only what the daemon writes and writes only through guarded steps (jobsets.py); the
daemon never imports this (Sidekiq keeps api.rb apart from its server the same way).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import redis as redis_lib

from ..connection import make_redis
from ..keys import COUNTERS, Keys
from ..payload import job_class_name
from . import ctltext
from .deadlimits import DeadLimits
from .entries import Entry, Filter
from .jobsets import JobSet, Unmovable
from .limits import LimiterInfo, Limits
from .locks import LockInfo, Locks
from .names import name_of, to_key
from .queues import Queue, latency_of

__all__ = ["Admin", "Stats", "Process", "Running", "Queue", "QueueSummary", "JobSet", "Entry",
           "Filter", "DeadLimits", "Locks", "LockInfo", "Limits", "LimiterInfo", "Unmovable"]

#: A remote signal left unread for this long is dropped (Sidekiq's EXPIRE on the list).
SIGNAL_TTL = 60


class Admin:
    """A handle on one Redis (and namespace) holding Sidekiq-format jobs."""

    def __init__(self, redis: redis_lib.Redis | None = None, *, url: str | None = None,
                 namespace: str | None = None, dead_limits: DeadLimits | None = None):
        """``dead_limits``: how many dead jobs to keep, and how long, when this API kills a
        job and no live daemon publishes its own bounds (else Sidekiq's: deadlimits.py)."""
        if redis is None:
            redis = make_redis(url or os.environ.get("REDIS_URL") or
                               "redis://127.0.0.1:6379/0", name="queued-admin")
        self.r = redis
        self.keys = Keys(namespace)
        self.scheduled = JobSet(redis, self.keys, "schedule", dead_limits)
        self.retries = JobSet(redis, self.keys, "retry", dead_limits)
        self.dead = JobSet(redis, self.keys, "dead", dead_limits)
        #: unique jobs' locks and rate limiters (issue 21)
        self.locks = Locks(redis, self.keys)
        self.limits = Limits(redis, self.keys)

    def jobset(self, name: str) -> JobSet:
        """``scheduled``/``schedule``, ``retry``/``retries`` or ``dead`` by name."""
        sets = {"schedule": self.scheduled, "scheduled": self.scheduled, "retry": self.retries,
                "retries": self.retries, "dead": self.dead, "morgue": self.dead}
        if name not in sets:
            raise ValueError(f"no job set named {name!r} (schedule, retry or dead)")
        return sets[name]

    # --- stats ------------------------------------------------------------------------------
    def stats(self) -> Stats:
        """The numbers ``Sidekiq::Stats`` gives on the same Redis (its fast and slow parts)."""
        k = self.keys
        pipe = self.r.pipeline(transaction=False)
        for name in ("processed", "failed"):
            pipe.get(k.stat(name))
        for key in (k.schedule, k.retry, k.dead):
            pipe.zcard(key)
        pipe.scard(k.processes)
        pipe.lindex(k.queue("default"), -1)
        processed, failed, scheduled, retries, dead, procs, oldest = pipe.execute()
        identities = [name_of(i) for i in self.r.sscan_iter(k.processes)]
        names = sorted(name_of(n) for n in self.r.sscan_iter(k.queues))
        pipe = self.r.pipeline(transaction=False)
        for identity in identities:
            pipe.hget(to_key(k.process(identity)), "busy")
        for name in names:
            pipe.llen(to_key(k.queue(name)))
        found = pipe.execute()
        sizes = dict(zip(names, (int(n) for n in found[len(identities):])))
        return Stats(processed=_int(processed), failed=_int(failed), scheduled_size=scheduled,
                     retry_size=retries, dead_size=dead, processes_size=procs,
                     default_queue_latency=latency_of(oldest),
                     workers_size=sum(_int(b) for b in found[:len(identities)]),
                     enqueued=sum(sizes.values()), queues=sizes)

    def counters(self) -> dict[str, int]:
        """queued's own counts, all time: jobs dropped as ``expired``, ``overlimit``
        reschedules, duplicate pushes dropped (``unique_dropped``) and duplicates put off as
        they started (``unique_deferred``)."""
        values = self.r.mget([self.keys.counter(name) for name in COUNTERS])
        return {name: _int(v) for name, v in zip(COUNTERS, values)}

    def history(self, days: int = 7, start: float | None = None) -> list[tuple[str, int, int]]:
        """(UTC day, processed, failed) for ``days`` days back from ``start`` (today),
        newest first (Sidekiq's Stats::History)."""
        start = time.time() if start is None else start
        dates = [Keys.utc_day(start - i * 86400) for i in range(days)]
        processed = self.r.mget([self.keys.stat("processed", d) for d in dates])
        failed = self.r.mget([self.keys.stat("failed", d) for d in dates])
        return [(d, _int(p), _int(f)) for d, p, f in zip(dates, processed, failed)]

    # --- queues -----------------------------------------------------------------------------
    def queue(self, name: str) -> Queue:
        return Queue(self.r, self.keys, name)

    def queues(self) -> list[Queue]:
        """Every queue in ``queues``, by name (Sidekiq's Queue.all)."""
        return [Queue(self.r, self.keys, name_of(n))
                for n in sorted(self.r.sscan_iter(self.keys.queues))]

    def paused(self) -> list[str]:
        return sorted(name_of(n) for n in self.r.smembers(self.keys.paused))

    def queue_summaries(self, now: float | None = None) -> list[QueueSummary]:
        """Every queue's size, latency and pause, by name, in three round trips however many
        queues there are (Queue.size() and latency() cost one each per queue). A paused
        queue is listed even when it has no jobs and so is not in ``queues`` yet."""
        now = time.time() if now is None else now
        paused = set(self.paused())
        names = sorted({name_of(n) for n in self.r.sscan_iter(self.keys.queues)} | paused)
        pipe = self.r.pipeline(transaction=False)
        for name in names:
            pipe.llen(to_key(self.keys.queue(name)))
            pipe.lindex(to_key(self.keys.queue(name)), -1)
        found = pipe.execute()
        return [QueueSummary(name, int(found[2 * i]), latency_of(found[2 * i + 1], now),
                             name in paused) for i, name in enumerate(names)]

    # --- processes --------------------------------------------------------------------------
    def processes(self) -> list[Process]:
        """Every live process (queued's and Sidekiq's) in ``processes``, by identity. A member
        whose record expired (it died without leaving) is skipped, not removed."""
        identities = sorted(name_of(i) for i in self.r.sscan_iter(self.keys.processes))
        pipe = self.r.pipeline(transaction=False)
        for identity in identities:
            pipe.hmget(to_key(self.keys.process(identity)), *_PROCESS_FIELDS)
        out = []
        for identity, values in zip(identities, pipe.execute()):
            if values[0] is not None:
                out.append(Process.from_hash(self, identity, dict(zip(_PROCESS_FIELDS, values))))
        return out

    def process(self, identity: str) -> Process | None:
        return next((p for p in self.processes() if p.identity == identity), None)

    def signal_all(self, signal_name: str) -> int:
        """Send TSTP (quiet), TERM (stop) or TTIN (dump) to every live process."""
        procs = self.processes()
        for p in procs:
            p.signal(signal_name)
        return len(procs)

    def running(self, now: float | None = None) -> list[Running]:
        """The jobs running now, as the processes' last heartbeats say (Sidekiq's WorkSet)."""
        now = time.time() if now is None else now
        procs = self.processes()
        pipe = self.r.pipeline(transaction=False)
        for p in procs:
            pipe.hgetall(to_key(self.keys.workers(p.identity)))
        out = []
        for p, work in zip(procs, pipe.execute()):
            for tid, value in sorted(work.items()):
                out.append(Running.from_work(p.identity, name_of(tid), value, now, p.pid))
        return out


@dataclass(frozen=True)
class Stats:
    processed: int
    failed: int
    scheduled_size: int
    retry_size: int
    dead_size: int
    processes_size: int
    default_queue_latency: float
    workers_size: int
    enqueued: int
    queues: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"processed": self.processed, "failed": self.failed,
                "scheduled": self.scheduled_size, "retries": self.retry_size,
                "dead": self.dead_size, "processes": self.processes_size,
                "busy": self.workers_size, "enqueued": self.enqueued,
                "default_latency": self.default_queue_latency, "queues": self.queues}


@dataclass(frozen=True)
class QueueSummary:
    name: str
    size: int
    latency: float
    paused: bool

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "latency": self.latency,
                "paused": self.paused}


_PROCESS_FIELDS = ("info", "busy", "beat", "quiet", "rss", "rtt_us", "reserved", "hangs")


@dataclass
class Process:
    admin: Admin = field(repr=False)
    identity: str
    info: dict
    busy: int
    beat: float | None
    is_quiet: bool
    rss_kb: int | None
    rtt_us: int | None
    #: queued's: jobs its workers hold (running, or taken and not started); Sidekiq: busy
    reserved: int = 0
    #: queued's: event loops stuck and jobs past their time limit (heartbeat.hangs)
    hangs: list = field(default_factory=list)

    @classmethod
    def from_hash(cls, admin: Admin, identity: str, values: dict) -> Process:
        try:
            info = json.loads(values["info"])
        except (TypeError, ValueError):
            info = {}
        try:
            hangs = json.loads(values.get("hangs") or b"[]")
        except ValueError:
            hangs = []
        busy = _int(values["busy"])
        return cls(admin, identity, info if isinstance(info, dict) else {}, busy,
                   _float(values["beat"]), values["quiet"] == b"true",
                   _int(values["rss"]) if values["rss"] is not None else None,
                   _int(values["rtt_us"]) if values["rtt_us"] is not None else None,
                   _int(values["reserved"]) if values.get("reserved") is not None else busy,
                   hangs if isinstance(hangs, list) else [])

    @property
    def hostname(self) -> str:
        return str(self.info.get("hostname", ""))

    @property
    def pid(self) -> int | None:
        return self.info.get("pid")

    @property
    def concurrency(self) -> int:
        """Jobs it runs at once (Sidekiq: its threads; queued: processes x threads)."""
        return _int(self.info.get("concurrency"))

    @property
    def shape(self) -> str:
        """queued's processes x threads (``2 × 25 threads``; per group: ``1 × 1, io 2 × 10``),
        or "" for one job per process (and for Sidekiq's processes)."""
        groups = self.info.get("groups")
        if not isinstance(groups, list) or not groups or not all(
                isinstance(g, dict) for g in groups):
            return ""
        if len(groups) == 1:
            g = groups[0]
            return f"{g.get('processes')} × {g.get('threads')} threads" \
                if _int(g.get("threads")) > 1 else ""
        return ", ".join(f"{ctltext.name(g['name']) + ' ' if g.get('name') else ''}"
                         f"{g.get('processes')} × {g.get('threads')}" for g in groups)

    @property
    def threads(self) -> int:
        """Threads of each worker process (queued's; Sidekiq's one process: its concurrency)."""
        return _int(self.info.get("threads")) or self.concurrency

    @property
    def queues(self) -> list[str]:
        return list(self.info.get("queues") or [])

    @property
    def tag(self) -> str:
        return str(self.info.get("tag") or "")

    @property
    def started_at(self) -> float | None:
        return _float(self.info.get("started_at"))

    @property
    def version(self) -> str:
        return str(self.info.get("version") or "")

    def signal(self, signal_name: str) -> None:
        """What Sidekiq's quiet!/stop!/dump_threads do: push the signal's name where the
        process reads it on its next heartbeat (a minute at most, then dropped)."""
        if signal_name not in ("TSTP", "USR1", "TERM", "TTIN"):
            raise ValueError(f"not a remote signal: {signal_name!r} (TSTP, TERM or TTIN)")
        key = to_key(self.admin.keys.signals(self.identity))
        pipe = self.admin.r.pipeline(transaction=True)
        pipe.lpush(key, signal_name)
        pipe.expire(key, SIGNAL_TTL)
        pipe.execute()

    def quiet(self) -> None:
        self.signal("TSTP")

    def stop(self) -> None:
        self.signal("TERM")

    def dump(self) -> None:
        self.signal("TTIN")

    def as_dict(self) -> dict[str, Any]:
        return {"identity": self.identity, "hostname": self.hostname, "pid": self.pid,
                "tag": self.tag, "version": self.version, "started_at": self.started_at,
                "concurrency": self.concurrency, "busy": self.busy, "queues": self.queues,
                "quiet": self.is_quiet, "beat": self.beat, "rss_kb": self.rss_kb,
                "rtt_us": self.rtt_us, "reserved": self.reserved, "threads": self.threads,
                "processes": _int(self.info.get("processes")) or 1, "hangs": self.hangs}


@dataclass(frozen=True)
class Running:
    """A running job, from its process's ``<identity>:workers`` hash. ``worker`` and ``pid``
    are what the job's log lines say (``pid=4242 tid=w3``): queued writes both beside
    Sidekiq's fields; for Sidekiq's own processes they are its thread id and the process's
    pid (its threads share it)."""
    identity: str
    tid: str
    queue: str
    run_at: float | None
    runtime: float | None
    entry: Entry
    worker: str = ""
    pid: int | None = None

    @classmethod
    def from_work(cls, identity: str, tid: str, value: bytes, now: float,
                  process_pid: int | None = None) -> Running:
        try:
            work = json.loads(value)
        except ValueError:
            work = {}
        if not isinstance(work, dict):
            work = {}
        payload = work.get("payload")
        # Sidekiq 6 writes the payload as a JSON string, 7+ as an object.
        raw = (payload.encode() if isinstance(payload, str) else
               json.dumps(payload or {}).encode())
        run_at = _float(work.get("run_at"))
        if run_at is not None and run_at > 1e11:  # Sidekiq 8: milliseconds
            run_at /= 1000
        queue = str(work.get("queue") or "")
        pid = work.get("pid")
        pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else process_pid
        return cls(identity, tid, queue, run_at, None if run_at is None else now - run_at,
                   Entry(raw, None, f"queue:{queue}"), str(work.get("worker") or tid), pid)

    def as_dict(self) -> dict[str, Any]:
        e = self.entry
        return {"identity": self.identity, "tid": self.tid, "worker": self.worker,
                "pid": self.pid, "queue": self.queue, "jid": e.jid, "class": e.klass,
                "args": e.args, "run_at": self.run_at, "runtime": self.runtime}


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


# (job_class_name is the class Sidekiq's Web UI shows: used by queuedctl's tables)
display_class = job_class_name
