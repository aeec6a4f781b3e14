"""The master's heartbeat: Sidekiq's process record, batched stats, the lease, remote signals.

Every ``heartbeat_interval`` (5 s, as Sidekiq 6) the master writes, in one MULTI:
- ``stat:processed``/``stat:failed`` and their UTC-dated twins (5-year TTL), by the number of
  jobs the workers finished since the last beat (read from the slot table, never a Redis
  write per job);
- ``<identity>:workers``: one field per running job, ``{"queue","payload","run_at"}``, named
  by its thread (the worker's pid in base 36, ``-<lane>`` for one of many jobs at once);
- ``processes`` + the ``<identity>`` hash (info, busy, beat, rtt_us, quiet, rss), 60 s TTL;
  queued adds ``reserved`` (jobs its workers hold: running, or taken and waiting to start)
  and ``hangs`` (a JSON list: event loops stuck, jobs past their time limit: watchdog.py);
- the master's lease (recovery.py), and an RPOP of ``<identity>-signals`` so Sidekiq's Web UI
  and API can quiet or stop this process.
So Sidekiq's Web UI, ``Sidekiq::ProcessSet`` and ``Sidekiq::Stats`` see queued as one of theirs.
A failed beat is logged by the caller and its counts go out with the next one.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import Sequence

import psutil
import redis

from .. import __version__
from . import recovery
from ..keys import Keys
from .log import pid_tag
from .running import Running, find
from .slots import SlotView, slot_count

#: TTL of the process record and of the dated stat keys (Sidekiq's values).
PROCESS_TTL = 60
STAT_TTL = 5 * 365 * 24 * 3600


def new_identity() -> str:
    """``hostname:pid:nonce`` (Sidekiq's shape; DYNO wins on Heroku like Sidekiq)."""
    host = os.environ.get("DYNO") or socket.gethostname()
    return f"{host}:{os.getpid()}:{os.urandom(6).hex()}"


def thread_tag(pid: int, record: int) -> str:
    """A running job's field in ``<identity>:workers`` (Sidekiq's thread id): the worker's pid
    in base 36, and ``-<lane>`` for a lane of a worker of many jobs at once."""
    return pid_tag(pid) if record == 0 else f"{pid_tag(pid)}-{record}"


def hangs(views: Sequence[SlotView], now: float) -> list[dict]:
    """What ``queuedctl processes`` names as hung: an event loop that has not run for a
    second or more (and the job it is stuck in), and jobs running past their time limit."""
    out = []
    for v in views:
        if v.record == 0 and not v.busy and v.lag >= 1.0:
            out.append({"worker": v.slot, "pid": v.pid, "loop_lag": round(v.lag, 1),
                        "jid": v.jid or None})
        elif v.busy and v.timeout and now - v.started > v.timeout:
            out.append({"worker": v.slot, "pid": v.pid, "thread": v.record, "jid": v.jid,
                        "class": v.job_class, "over": round(now - v.started - v.timeout, 1)})
    return out


class Heartbeat:
    def __init__(self, r: redis.Redis, keys: Keys, identity: str, config, started_at: float):
        self.r = r
        self.keys = keys
        self.identity = identity
        self.started_at = started_at
        self.reconfigure(config)
        self.registration = recovery.registration(slot_count(config.process_count),
                                                  config.queue_names)
        self.sent = (0, 0)  # processed, failed already flushed to stat:*
        self.renewed_at: float | None = None  # monotonic time of the last beat that went out
        #: What the last beat found about this master's own lease, for the master to log:
        #: None while the lease was live, else a sentence (see _lapse).
        self.lapse: str | None = None

    def reconfigure(self, config) -> None:
        """Take ``config`` (at start, and after a HUP: a new tag or labels show at once)."""
        self.config = config
        self.info = json.dumps({
            "hostname": self.identity.rsplit(":", 2)[0], "started_at": self.started_at,
            "pid": os.getpid(), "tag": config.tag, "concurrency": config.jobs_at_once,
            "processes": config.process_count, "threads": config.max_threads,
            "groups": [{"name": g.name, "queues": list(g.queue_names),
                        "processes": g.concurrency, "threads": g.threads}
                       for g in config.worker_groups],
            "queues": list(config.queue_names), "labels": list(config.labels),
            "identity": self.identity, "version": __version__,
            # the dead set's bounds, so the operator's tools trim dead as the daemons do
            "dead_max_jobs": config.dead_max_jobs,
            "dead_timeout_in_seconds": config.dead_timeout_in_seconds,
        }, separators=(",", ":"))

    def _counts(self, views: Sequence[SlotView]) -> tuple[int, int]:
        return sum(v.processed for v in views), sum(v.failed for v in views)

    def _stats(self, pipe, views: Sequence[SlotView], now: float) -> tuple[int, int]:
        total = self._counts(views)
        day = Keys.utc_day(now)
        deltas = (("processed", total[0] - self.sent[0]), ("failed", total[1] - self.sent[1]))
        for name, n in deltas:
            pipe.incrby(self.keys.stat(name), n)
            pipe.incrby(self.keys.stat(name, day), n)
            pipe.expire(self.keys.stat(name, day), STAT_TTL)
        return total

    def _running(self, views: Sequence[SlotView]) -> dict[str, str]:
        """``<identity>:workers`` fields. The payload is the running job's own bytes, found
        as its slot record names it (running.py: not by its jid, which another reserved job
        may share; a batch's finished jobs are still reserved until their ack goes out, so
        the earliest reservation is not always the running job)."""
        busy = [v for v in views if v.busy]
        if not busy:
            return {}
        pipe = self.r.pipeline(transaction=False)
        for v in busy:
            pipe.zrange(self.keys.reserved(self.identity, v.slot), 0, -1)
        out = {}
        for v, members in zip(busy, pipe.execute()):
            member = find(members, Running.of(v))
            # (not found: its ack went out before its record turned idle, or the record was
            # read before the reservation; what the record itself says, never another lane's
            # job: RT7 showed one job on up to 9 lanes of a beat)
            raw = member.split(b"\0", 2)[2] if member else json.dumps(
                {"class": v.job_class, "args": [], "jid": v.jid}).encode()
            out[thread_tag(v.pid, v.record)] = json.dumps({
                "queue": v.queue, "payload": raw.decode("utf-8", "replace"),
                "run_at": int(v.started_at), "pid": v.pid,
                "worker": f"w{v.slot}-{v.record}" if v.record else f"w{v.slot}"},
                separators=(",", ":"), ensure_ascii=False)  # (worker, pid: as log lines say)
        return out

    def _rss_kb(self, pids: Sequence[int]) -> int:
        """The master's RSS and its live workers' (the master's own list: a slot's record
        keeps the pid of a worker that left until the next one starts, and a pid is reused)."""
        total = 0
        for pid in [os.getpid(), *pids]:
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                pass
        return total // 1024

    def beat(self, views: Sequence[SlotView], quiet: bool, lease_ms: int,
             pids: Sequence[int] = ()) -> str | None:
        """Write one beat; return a remote signal name (TSTP, TERM, TTIN) if one was queued."""
        t0 = time.perf_counter()
        self.r.ping()
        rtt_us = int((time.perf_counter() - t0) * 1e6)
        running = self._running(views)
        now = time.time()
        ident, k = self.identity, self.keys
        pipe = self.r.pipeline(transaction=True)
        total = self._stats(pipe, views, now)
        pipe.unlink(k.workers(ident))
        if running:
            pipe.hset(k.workers(ident), mapping=running)
            pipe.expire(k.workers(ident), PROCESS_TTL)
        pipe.sadd(k.processes, ident)
        pipe.hset(k.process(ident), mapping={
            "info": self.info, "busy": str(len(running)), "beat": repr(now),
            "rtt_us": str(rtt_us), "quiet": "true" if quiet else "false",
            "rss": str(self._rss_kb(pids)),
            "reserved": str(len(running) + sum(v.held for v in views)),
            "hangs": json.dumps(hangs(views, time.monotonic()), separators=(",", ":"))})
        pipe.expire(k.process(ident), PROCESS_TTL)
        # The registration goes with the lease: a Redis that lost its data (restarted without
        # persistence, a failover) lost it too, and an unregistered master is never reaped
        # if it dies, so its reserved jobs would be stranded.
        pipe.hset(k.masters, ident, self.registration)
        pipe.set(k.lease(ident), "1", px=lease_ms, get=True)
        pipe.rpop(k.signals(ident))
        result = pipe.execute()
        self.sent = total
        self.lapse = self._lapse(result[-3] == 1, result[-2] is None, lease_ms)
        self.renewed_at = time.monotonic()
        signal_name = result[-1]
        return signal_name.decode() if signal_name else None

    def _lapse(self, registered_anew: bool, lease_gone: bool, lease_ms: int) -> str | None:
        """A master frozen (SIGSTOP, a VM paused) or cut off from Redis for longer than its
        lease finds its lease gone when it beats again, and maybe its registration too: then
        another master has put the jobs its workers held back in their queues (they may run
        twice). The beat has just registered it again, so what its workers reserve from now
        on is recoverable; say so, once, instead of carrying on as if nothing happened."""
        if not lease_gone and not registered_anew:
            return None
        silent = ("" if self.renewed_at is None else
                  f" (no heartbeat for {time.monotonic() - self.renewed_at:.1f}s)")
        what = (f"this master's lease had expired{silent}, past lease_timeout "
                f"{lease_ms / 1000:g}s")
        if registered_anew:
            return (f"{what}, and its registration was gone: another master has put the jobs "
                    "its workers held back in their queues (they may run twice), or Redis "
                    "lost its data; registered again and renewing")
        return f"{what}; no other master had recovered its jobs; renewed"

    def clear(self, views: Sequence[SlotView]) -> None:
        """At exit: flush the last counts and leave ``processes`` (the hash expires by itself,
        as Sidekiq leaves it)."""
        pipe = self.r.pipeline(transaction=True)
        self.sent = self._stats(pipe, views, time.time())
        pipe.srem(self.keys.processes, self.identity)
        pipe.unlink(self.keys.workers(self.identity))
        pipe.execute()
