"""What the master does for a worker that exited: its slot is settled (recovery.settle: the
jobs it held go back to the head of their queues, the one it was running counts a crash or
takes the failure path), retried on every turn of the loop while Redis is away (the slot is not
reused until then); and the failures Redis refused to store (recovery.Held: a retry or dead key
of another type) are written again on every heartbeat until it takes them.

A worker that died blocked in BLMOVE leaves that BLMOVE pending in Redis until Redis reads its
closed socket (or the block times out): served after its slot was put back, it would land the
next job in a list of this slot that, once this master has left, no master ever looks at. So
its connection is closed first (CLIENT KILL by the client id the worker left in the watch
table: tests/test_late_landing.py). Another master reaping this one after a lease expiry needs
no such step: a BLMOVE cannot outlive its fetch_timeout, and the lease outlives the last one
as long as fetch_timeout is below lease_timeout less a heartbeat.

Does not own how workers end (children.py) nor the loop (master.py).
"""
from __future__ import annotations

import logging
from typing import Callable

import redis

from . import recovery
from .children import Exit
from .running import Running
from .slots import Notes, SlotTable, SlotWriter, Watch

log = logging.getLogger("queued.master")

#: A condition that persists (jobs that cannot be put back, failures that cannot be written)
#: is logged at most this often (seconds).
KEY_LOG_INTERVAL = 60.0


class Exits:
    def __init__(self, r: redis.Redis, keys, identity: str, config, table: SlotTable,
                 notes: Notes, redis_error: Callable[[str, Exception], None],
                 count_failure: Callable[[str, str], None] = lambda job_class, queue: None,
                 watch: Watch | None = None):
        self.r = r
        self.count_failure = count_failure  # the per-class metrics' (jobmetrics.py)
        self.keys = keys
        self.identity = identity
        self.config = config
        self.app = None  # where job classes are looked up (None: live; server/loader.py)
        self.watch = watch  # which worker was blocked, on which Redis connection (slots.py)
        self.table = table
        self.notes = notes
        self.redis_error = redis_error  # the master's "Redis is away: log once" step
        #: slot -> how its worker ended: exited, its jobs not yet put back
        self.unrecovered: dict[int, Exit] = {}
        self.held: list[recovery.Held] = []  # failures Redis refused to store (retried)

    def add(self, ended: Exit) -> None:
        self.unrecovered[ended.slot] = ended
        self.settle(ended)

    def retry(self) -> None:
        for ended in list(self.unrecovered.values()):
            self.settle(ended)

    def settle(self, ended: Exit) -> None:
        """Settle an exited worker's slot (recovery.settle); retried every loop while Redis
        is away, and the slot is not reused until it succeeds."""
        slot = ended.slot
        try:
            self._end_blocked_fetch(slot)
            moved, failed, held = recovery.settle(
                self.r, self.keys, self.identity, self.config, slot, code=ended.code,
                reason=ended.reason, running=ended.running, culprits=ended.culprits,
                ignored="its JobTimeout" if ended.lanes else "SIGALRM", app=self.app)
        except recovery.Stuck as e:
            if self.notes.due(("stuck", slot), KEY_LOG_INTERVAL):
                log.error("%s", e)
            return
        except (redis.RedisError, OSError) as e:
            self.redis_error("recover a worker's jobs", e)
            return
        if failed:
            # The dead worker never counted these jobs; count them for the stats (the slot
            # is free): in the records that name them
            for v in self.table.slot_views(slot, writer_alive=False):
                if v.busy and failed and (Running.of(v) in ended.culprits
                                          or len(ended.running) == 1):
                    failed -= 1
                    self.count_failure(v.job_class, v.queue)
                    SlotWriter(self.table, slot, 0, v.record).end(failed=True)
        if held:
            self.held.extend(held)
            self.notes.due("held", KEY_LOG_INTERVAL)  # (settle logged it just now)
        self.unrecovered.pop(slot, None)
        if ended.reason != "exit" or moved:
            back = [j.jid for j in ended.running if j not in ended.culprits]
            log.log(logging.INFO if ended.reason in ("exit", "shutdown", "replaced")
                    else logging.WARNING,
                    "worker %d %s (%s); %d job(s) put back at the head of their queues%s", slot,
                    "died" if ended.reason == "crash" else "exited" if ended.reason == "exit"
                    else "stopped", ended.describe(), moved,
                    f" (running: {', '.join(back)})" if back and len(ended.running) > 1 else "")

    def _end_blocked_fetch(self, slot: int) -> None:
        """Close the connection of a worker that died blocked in BLMOVE (module header), if
        Redis still has it: the client id it left, under the name its slot gives it."""
        blocked = self.watch.blocked().get(slot) if self.watch is not None else None
        if blocked is None:
            return
        client_id = blocked[1]
        try:
            # (checked by name: a client id means nothing on another server, after a failover)
            found = self.r.client_list(client_id=[client_id])
            if found and found[0].get("name") == f"queued-worker-{slot}":
                self.r.client_kill_filter(_id=client_id, skipme=True)
        except redis.ResponseError as e:  # an ACL without CLIENT: its block times out anyway
            log.debug("could not close the connection of worker %d: %s", slot, e)

    def write_held(self) -> None:
        """Try again to store the failures Redis refused (recovery.Held). Raises Redis errors
        (the heartbeat's caller logs them)."""
        for held in list(self.held):
            if recovery.write_held(self.r, self.keys, self.identity, self.config, held):
                self.held.remove(held)
                log.info("worker %d: the failure Redis refused is written now (%s)", held.slot,
                         held.kind)
        if self.held and self.notes.due("held", KEY_LOG_INTERVAL):
            log.error("%d failed job(s) stay reserved: their retry/dead key holds another Redis "
                      "type (WRONGTYPE)", len(self.held))
