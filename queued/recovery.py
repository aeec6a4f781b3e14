"""Recovery, the master's side of reliable fetch: nothing a dead worker or host held is lost.

Two paths (LANDSCAPE.md 2f):
- a worker exits: its master puts everything the slot holds back at the head of its queues at
  once (``requeue_slot``); the job it was running counts one crash against its jid, and a job
  that keeps killing workers goes to ``dead`` (a poison pill) instead of looping for ever;
- a whole host dies: its master's lease key expires (Redis's clock, renewed by every heartbeat),
  and any other master requeues all of its slots (``reap_expired``). The requeue script checks
  the lease and the registration inside Redis, so two masters reaping at once cannot requeue a
  job twice.

The lease is held per master, not per job: one renewal a beat covers every job the master
runs, so a long job is never recovered while its master lives.
"""
from __future__ import annotations

import json
import logging
import signal
from typing import Sequence

import redis

from . import events, retry
from . import payload as codec
from .connection import FAIL, REQUEUE
from .errors import JobTimeout, PayloadError, WorkerKilled
from .fetch import Reservation, split_member
from .job import registry
from .keys import Keys
from .slots import stored_jid

log = logging.getLogger("queued.recovery")

#: Seconds a per-jid crash count is remembered.
CRASH_MEMORY = 7 * 24 * 3600


def register(r: redis.Redis, keys: Keys, identity: str, slots: int, queues: Sequence[str],
             lease_ms: int) -> None:
    """Announce this master and take its first lease before any worker reserves a job."""
    pipe = r.pipeline(transaction=True)
    pipe.hset(keys.masters, identity, registration(slots, queues))
    pipe.set(keys.lease(identity), "1", px=lease_ms)
    pipe.execute()


def registration(slots: int, queues: Sequence[str]) -> str:
    """What ``queued:masters`` holds for a master: enough for another master to reap it."""
    return json.dumps({"slots": slots, "queues": list(queues)})


def unregister(r: redis.Redis, keys: Keys, identity: str) -> None:
    pipe = r.pipeline(transaction=True)
    pipe.hdel(keys.masters, identity)
    pipe.delete(keys.lease(identity))
    pipe.execute()


def _slot_keys(keys: Keys, identity: str, slot: int, queues: Sequence[str]) -> list[str]:
    return [keys.reserved(identity, slot), *(keys.landing(identity, slot, q) for q in queues)]


def _requeue(r: redis.Redis, keys: Keys, owner: str, identity: str, slots: Sequence[int],
             queues: Sequence[str]) -> int:
    """Returns the number of jobs put back (-1: the guard said no). A job whose queue key is
    not a list goes to dead instead (requeue.lua); that is logged here."""
    ks = [keys.masters, keys.lease(identity), keys.dead, *(keys.queue(q) for q in queues)]
    for slot in slots:
        ks.extend(_slot_keys(keys, identity, slot, queues))
    moved, dead = (int(x) for x in REQUEUE(r, ks, [owner, len(queues), *queues]))
    if dead:
        log.error("%d job(s) of %s could not be put back: their queue key holds another Redis "
                  "type, not a list (WRONGTYPE); sent to dead as they were", dead, identity)
    return moved


def requeue_slot(r: redis.Redis, keys: Keys, identity: str, slot: int,
                 queues: Sequence[str]) -> int:
    """Everything one slot holds goes back to the head of its queue, earliest first."""
    return _requeue(r, keys, "", identity, [slot], queues)


def current_job(r: redis.Redis, keys: Keys, identity: str, slot: int,
                queues: Sequence[str], jid: str | None = None) -> Reservation | None:
    """The job the slot runs (or ran when it died).

    With ``jid`` (what the slot table says the worker was running, as the table stores it):
    the reservation of that job, or None. Without: the earliest reservation. The jid is
    needed since acks are deferred to the next reserve call, so the finished jobs of a batch
    sit before the running one; charging them with its crash or timeout was wrong."""
    key = keys.reserved(identity, slot)
    if jid is None:
        members = r.zrange(key, 0, 0)
        return Reservation(members[0], *split_member(members[0])) if members else None
    for member in r.zrange(key, 0, -1):
        queue, payload = split_member(member)
        try:
            msg = json.loads(payload)
        except ValueError:
            continue
        if isinstance(msg, dict) and isinstance(msg.get("jid"), str) \
                and stored_jid(msg["jid"]) == jid:
            return Reservation(member, queue, payload)
    return None


def count_crash(r: redis.Redis, keys: Keys, jid: str) -> int:
    key = keys.crashes(jid)
    pipe = r.pipeline(transaction=True)
    pipe.incr(key)
    pipe.expire(key, CRASH_MEMORY)
    return int(pipe.execute()[0])


def fail_reservation(r: redis.Redis, keys: Keys, identity: str, slot: int, res: Reservation,
                     kind: str, score: float, payload: str, dead_timeout: int,
                     dead_max_jobs: int) -> bool:
    """The failure path for a job whose worker can no longer run it (killed at its timeout, or
    a poison pill): same atomic write the worker itself uses."""
    target = keys.retry if kind == "retry" else keys.dead
    args = [res.member, kind, repr(float(score)), payload, repr(score - dead_timeout),
            dead_max_jobs]
    return FAIL(r, [keys.reserved(identity, slot), target], args) == 1


def reap_expired(r: redis.Redis, keys: Keys) -> list[tuple[str, int]]:
    """Requeue the jobs of every registered master whose lease has expired."""
    masters = r.hgetall(keys.masters)
    if not masters:
        return []
    ids = [k.decode() for k in masters]
    pipe = r.pipeline(transaction=False)
    for identity in ids:
        pipe.exists(keys.lease(identity))
    alive = pipe.execute()
    reaped = []
    for identity, live in zip(ids, alive):
        if live:
            continue
        try:
            desc = json.loads(masters[identity.encode()])
            slots, queues = range(int(desc["slots"])), [str(q) for q in desc["queues"]]
        except (ValueError, KeyError, TypeError):
            log.error("master %s has an unreadable registration %r; left alone",
                      identity, masters[identity.encode()])
            continue
        moved = _requeue(r, keys, identity, identity, slots, queues)
        if moved >= 0:
            reaped.append((identity, moved))
    return reaped


def settle(r: redis.Redis, keys: Keys, identity: str, config, slot: int, *, code: int,
           reason: str, running_jid: str, timeout: float = 0.0) -> tuple[int, bool]:
    """After a worker exited: the job it was running takes the failure path if the master
    killed it for its timeout, or if it has now killed ``max_crashes`` workers (a poison pill);
    everything else the slot holds goes back to the head of its queue.
    Returns (jobs put back, whether a failure was recorded)."""
    failed = False
    if running_jid and reason in ("timeout", "crash"):
        current = current_job(r, keys, identity, slot, config.queue_names, jid=running_jid)
        if current is not None:
            failed = _fail_running(r, keys, identity, config, slot, current, code, reason,
                                   timeout)
    return requeue_slot(r, keys, identity, slot, config.queue_names), failed


def _fail_running(r, keys, identity, config, slot, current: Reservation, code: int,
                  reason: str, timeout: float) -> bool:
    try:
        msg = codec.loads(current.payload)
        codec.validate(msg)
    except PayloadError:
        return False  # requeued with the rest; the next worker rejects it to dead
    if reason == "timeout":
        exc: BaseException = JobTimeout(
            f"{msg['class']} ran past its {timeout:g}s timeout and ignored SIGALRM; its "
            f"worker was killed after {config.timeout_grace:g}s more")
    else:
        crashes = count_crash(r, keys, msg["jid"])
        log.warning("class=%s jid=%s killed its worker (%s), crash %d of %d", msg["class"],
                    msg["jid"], describe_status(code), crashes, config.max_crashes)
        if crashes < config.max_crashes:
            return False  # requeued with the rest
        exc = WorkerKilled(f"{msg['class']} killed its worker {crashes} times "
                           f"(last: {describe_status(code)}); sent to dead as a poison pill")
    cls = registry.lookup(msg["class"])
    if reason == "timeout":
        outcome = retry.decide(msg, exc, current.queue, job_class=cls,
                               max_retries=config.max_retries, backtrace_lines=[])
    else:
        outcome = retry.kill(msg, exc, current.queue, job_class=cls)
    fail_reservation(r, keys, identity, slot, current, outcome.kind, outcome.score,
                     outcome.payload, config.dead_timeout_in_seconds, config.dead_max_jobs)
    log.error("class=%s jid=%s %s -> %s", msg["class"], msg["jid"], exc, outcome.kind)
    events.report(exc, {"job": msg, "queue": current.queue, "outcome": outcome.kind})
    return True


def describe_status(code: int) -> str:
    """A worker's exit as a person would say it (``killed by SIGKILL (out of memory?)``)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"
