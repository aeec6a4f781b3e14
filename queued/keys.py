"""Every Redis key name queued reads or writes, in one place.

Sidekiq's keys keep Sidekiq's names exactly (SIDEKIQ_FORMAT.md section 1) so Ruby and PHP
producers and Sidekiq's own tools keep working. queued's own keys all start with ``queued:`` so
no Sidekiq tool trips over them. A namespace, when configured, prefixes every key the way
redis-namespace does for Ruby (``NS:queue:default``).

This module owns names only; which module writes each key is noted beside it.
"""
from __future__ import annotations

import time
from datetime import datetime

from . import metricskeys


class Keys:
    """Key names under one optional namespace. Cheap to build; immutable."""

    __slots__ = ("ns",)

    def __init__(self, namespace: str | None = None):
        self.ns = f"{namespace}:" if namespace else ""

    # --- Sidekiq's keys -------------------------------------------------------------------
    @property
    def queues(self) -> str:  # set of queue names; client.py SADDs
        return self.ns + "queues"

    def queue(self, name: str) -> str:  # list; client LPUSHes, fetch.py pops the right end
        return f"{self.ns}queue:{name}"

    def queue_name(self, key: str) -> str:
        """Inverse of queue(): ``NS:queue:low`` -> ``low``."""
        return key[len(self.ns) + len("queue:"):]

    @property
    def schedule(self) -> str:  # zset; client.py adds, scheduler.py moves due jobs
        return self.ns + "schedule"

    @property
    def retry(self) -> str:  # zset; retry.py (via fetch.fail) adds, scheduler.py moves
        return self.ns + "retry"

    @property
    def dead(self) -> str:  # zset; retry.py (via fetch.fail) adds and trims
        return self.ns + "dead"

    def stat(self, name: str, day: str | None = None) -> str:  # heartbeat.py INCRBYs
        return f"{self.ns}stat:{name}:{day}" if day else f"{self.ns}stat:{name}"

    @staticmethod
    def utc_day(now: float | None = None) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(now if now is not None else time.time()))

    @property
    def paused(self) -> str:  # set of paused queue names (Sidekiq Pro's); admin API writes
        return self.ns + "paused"

    @property
    def processes(self) -> str:  # set of identities; heartbeat.py
        return self.ns + "processes"

    def process(self, identity: str) -> str:  # hash info/busy/beat/...; heartbeat.py
        return self.ns + identity

    def workers(self, identity: str) -> str:  # hash of running jobs; heartbeat.py
        return f"{self.ns}{identity}:workers"

    def signals(self, identity: str) -> str:  # list of remote signals; heartbeat.py RPOPs
        return f"{self.ns}{identity}-signals"

    # --- Sidekiq's per-class metrics (metricskeys.py has both layouts); metricsflush.py writes
    def metrics_minute(self, t: datetime | float) -> str:  # hash, Sidekiq 8
        return self.ns + metricskeys.minute_key(t)

    def metrics_rollup(self, t: datetime | float) -> str:  # hash of 10 minutes, Sidekiq 8
        return self.ns + metricskeys.rollup_key(t)

    def metrics_histogram(self, klass: str, t: datetime | float) -> str:  # BITFIELD, Sidekiq 8
        return self.ns + metricskeys.histogram_key(klass, t)

    def metrics_minute_v7(self, t: datetime | float) -> str:  # hash, Sidekiq 7
        return self.ns + metricskeys.minute_key_v7(t)

    def metrics_histogram_v7(self, klass: str, t: datetime | float) -> str:  # Sidekiq 7
        return self.ns + metricskeys.histogram_key_v7(klass, t)

    # --- queued's own keys ----------------------------------------------------------------
    def reserved(self, identity: str, slot: int) -> str:
        """zset of jobs one worker slot holds; member ``queue NUL token NUL payload``,
        score = Redis time of reservation. Written only by the Lua scripts in fetch.py."""
        return f"{self.ns}queued:reserved:{identity}:{slot}"

    def landing(self, identity: str, slot: int, queue: str) -> str:
        """list a blocked worker BLMOVEs one job into, one per (slot, queue) so recovery
        knows which queue a landed job came from without parsing it."""
        return f"{self.ns}queued:landing:{identity}:{slot}:{queue}"

    def idle(self, identity: str, slot: int) -> str:
        """list nobody writes: a worker whose queues are all paused blocks on it (BLPOP) until
        its master wakes it (fetch.Fetcher.wait)."""
        return f"{self.ns}queued:idle:{identity}:{slot}"

    @property
    def masters(self) -> str:  # hash identity -> JSON {slots, queues}; recovery.py
        return self.ns + "queued:masters"

    def lease(self, identity: str) -> str:
        """string with a PX TTL (Redis's clock) renewed by the master's heartbeat; while it
        exists none of that master's reservations is recovered by anyone else."""
        return f"{self.ns}queued:lease:{identity}"

    @property
    def scheduler_leader(self) -> str:  # string identity, PX TTL; scheduler.py
        return self.ns + "queued:scheduler-leader"

    def snapshot(self, token: str) -> str:
        """a copy of a job set or a queue that one bulk action walks (admin/snapshot.py
        writes it with COPY, gives it a TTL and unlinks it when done)."""
        return f"{self.ns}queued:snapshot:{token}"

    def snapshot_held(self, token: str) -> str:
        """string: what a copy was counted for (a digest of its key and search), with the
        copy's TTL, until the question's answer takes it (DEL): the copy was taken (a copy of
        an empty set is no key at all) and not answered yet; admin/snapshot.py."""
        return f"{self.ns}queued:snapshot-held:{token}"

    # --- periodic jobs: sidekiq-cron 1.x's layout (the one beside Sidekiq 6.4), so its Web UI
    # tab shows queued's schedules; not under queued: for that reason -----------------------
    @property
    def cron_jobs(self) -> str:  # set of "cron_job:<name>" (not namespaced); server/periodic.py
        return self.ns + "cron_jobs"

    @staticmethod
    def cron_member(name: str) -> str:
        """A member of cron_jobs: sidekiq-cron stores the hash's un-namespaced key."""
        return f"cron_job:{name}"

    def cron_job(self, name: str) -> str:
        """hash of one schedule (name, klass, cron, message, status, last_enqueue_time, ...):
        server/periodic.py writes the definition, queued/lua/cron_enqueue.lua the times,
        admin/cron.py the status."""
        return f"{self.ns}cron_job:{name}"

    def cron_enqueued(self, name: str) -> str:  # zset tick ISO -> epoch; cron_enqueue.lua
        return f"{self.ns}cron_job:{name}:enqueued"

    def cron_history(self, name: str) -> str:  # list of {jid, enqueued}; cron_enqueue.lua
        return f"{self.ns}cron_job:{name}:jid_history"

    # --- tasks (task.py creates them; queued/lua/task.lua moves their jobs; an operator deletes
    # one with admin/taskadmin.py) -----------------------------------------------------------
    def task(self, task_id: str) -> str:
        """hash: description, created_at, sealed, callbacks, TTLs, completed_at, succeeded_at."""
        return f"{self.ns}queued:task:{task_id}"

    def task_keys(self, task_id: str) -> list[str]:
        """Every key of one task, in the order queued/lua/task.lua takes them: the hash, one
        set of jids per state (TASK_STATES), then the hashes jid -> record (class, queue,
        args), jid -> last error, jid -> message lines."""
        base = self.task(task_id)
        return [base, *(f"{base}:{state}" for state in TASK_STATES),
                f"{base}:jobs", f"{base}:errors", f"{base}:log"]

    @property
    def tasks(self) -> str:  # zset id -> created_at, newest last; task.py adds, trims; taskadmin
        return self.ns + "queued:tasks"

    # --- unique jobs, rate limits, expiring jobs (issue 21) ------------------------------------
    def unique(self, digest: str) -> str:
        """string: the jid holding the unique lock of one (class, queue, args), with a PX TTL;
        no index of them exists (a global set of digests was sidekiq-unique-jobs' 3 GB key,
        its #821). Taken by queued/lua/unique_push.lua (the client) or unique_start.lua (the
        worker), released by unique_release.lua (worker, master, operator)."""
        return f"{self.ns}queued:unique:{digest}"

    @property
    def unique_pattern(self) -> str:
        """SCAN MATCH pattern of every unique lock (the operator's listing)."""
        return _glob_escape(f"{self.ns}queued:unique:") + "*"

    def counter(self, name: str) -> str:
        """string: a cluster-wide count of queued's own events (COUNTERS), INCRed by the
        script that makes the event happen."""
        return f"{self.ns}queued:stat:{name}"

    @property
    def limiters(self) -> str:  # zset limiter name -> last use (epoch); queued/limiter.py
        return self.ns + "queued:limiters"

    def limiter(self, name: str, part: str = "") -> str:
        """One limiter's keys, all under ``queued:limiter:{name}`` (a hash tag: one Redis
        Cluster slot for all of them, and no name can reach into another's keys). ``part``:
        "" the hash of its definition and counts; "leases" (concurrent: zset token ->
        lease end), "wake" (concurrent: list a release pushes a token to, waiters BLPOP),
        "parked" (concurrent: zset of over-limit jobs' schedule members, woken on release),
        "state" (bucket and leaky: hash; window: zset of grants). Written only by
        queued/lua/limit_*.lua."""
        base = f"{self.ns}queued:limiter:{{{name}}}"
        return f"{base}:{part}" if part else base

    def limiter_name(self, key: str) -> str:
        """Inverse of limiter(): the name in a limiter's hash key."""
        return key[len(self.ns) + len("queued:limiter:{"):-1]


#: A task's job states, in the order of their sets in Keys.task_keys and task.lua. ``retry`` is
#: an error waiting for its retry, ``error`` a final one (the job died, or was buried).
TASK_STATES = ("enqueued", "working", "finished", "failed", "retry", "error")

#: queued's own cluster-wide counts (Keys.counter): jobs dropped as expired, over-limit
#: reschedules, duplicate pushes dropped (client), duplicates that found another copy running
#: when they started (worker: deferred, never run at once with it).
COUNTERS = ("expired", "overlimit", "unique_dropped", "unique_deferred")


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
