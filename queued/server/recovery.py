"""Recovery, the master's side of reliable fetch: nothing a dead worker or host held is lost.

Two paths (LANDSCAPE.md 2f):
- a worker exits: its master puts everything the slot holds back at the head of its queues at
  once (``settle``); the job it was running counts one crash, and a job that keeps killing
  workers goes to ``dead`` (a poison pill) instead of looping for ever;
- a whole host dies: its master's lease key expires (Redis's clock, renewed by every heartbeat),
  and any other master requeues all of its slots (``reap_expired``). The requeue script checks
  the lease and the registration inside Redis, so two masters reaping at once cannot requeue a
  job twice.

The lease is held per master, not per job: one renewal a beat covers every job the master
runs, so a long job is never recovered while its master lives.

A job's crash count travels in its payload (``payload.CRASHES``), written by the same script
that puts it back in its queue. It was a ``queued:crashes:<jid>`` key with a week's TTL: a
count the master could double on a retried settle, that outlived a job's success (a later
crash of a retry of the same jid started from the old count), and that cost a key per crash.
The field goes away with the run that ends the streak (a success, or a failure: retry.py).
"""
from __future__ import annotations

import json
import logging
import signal
from typing import NamedTuple, Sequence

import redis

from .. import events
from .. import activejob, tracking, unique
from . import retry
from .. import payload as codec
from .scripts import FAIL, REQUEUE
from ..errors import JobTimeout, PayloadError, QueuedError, WorkerKilled
from .reserved import REFUSED, WRITTEN, Reservation, failure_call, split_member
from ..jobregistry import registry
from ..keys import Keys
from . import running as running_mod
from .running import Running

log = logging.getLogger("queued.recovery")


class Stuck(QueuedError):
    """Jobs that could not be put back: their queue key and ``dead`` both hold another Redis
    type. They stay where they were (requeue.lua); the caller retries once the keys are fixed."""


class Held(NamedTuple):
    """A failure the master could not write (its target key holds another Redis type): the
    job stays reserved, marked by fail.lua, until ``write_held`` succeeds."""
    slot: int
    member: bytes
    kind: str
    score: float
    payload: str
    task: tracking.Move | None = None


class Charge(NamedTuple):
    """What a job the master killed its worker for is charged with: its time limit (0: it
    had none) and, for one that held its process's event loop, for how long it held it."""
    timeout: float
    blocked: float = 0.0


class Settled(NamedTuple):
    moved: int               # jobs put back in their queues
    failed: int              # running jobs that took the failure path (stat:failed counts them)
    held: tuple[Held, ...]   # ... those of them whose failure could not be written yet


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
             queues: Sequence[str], replace: dict[bytes, str | bytes] | None = None,
             keep: Sequence[bytes] = ()) -> tuple[int, int]:
    """(jobs put back, jobs left in place); (-1, 0) when the guard said no. A job whose queue
    key is not a list goes to dead instead (requeue.lua); that is logged here."""
    ks = [keys.masters, keys.lease(identity), keys.dead, *(keys.queue(q) for q in queues)]
    for slot in slots:
        ks.extend(_slot_keys(keys, identity, slot, queues))
    pairs = [x for item in (replace or {}).items() for x in item]
    args = [owner, len(queues), *queues, len(pairs) // 2, *pairs, len(keep), *keep]
    moved, dead, stuck = (int(x) for x in REQUEUE(r, ks, args))
    if dead:
        log.error("%d job(s) of %s could not be put back: their queue key holds another Redis "
                  "type, not a list (WRONGTYPE); sent to dead as they were", dead, identity)
    return moved, stuck


def requeue_slot(r: redis.Redis, keys: Keys, identity: str, slot: int, queues: Sequence[str],
                 replace: dict[bytes, str | bytes] | None = None,
                 keep: Sequence[bytes] = ()) -> int:
    """Everything one slot holds goes back to the head of its queue, earliest first, except
    the members in ``keep``; a member in ``replace`` goes back as the payload given there.
    Raises Stuck if some job could go nowhere (it stays in the slot)."""
    moved, stuck = _requeue(r, keys, "", identity, [slot], queues, replace, keep)
    if stuck:
        raise Stuck(f"{stuck} job(s) of worker slot {slot} cannot be put back: their queue key "
                    f"and {keys.dead} both hold another Redis type (WRONGTYPE); they stay "
                    f"reserved until the keys are fixed")
    return moved


def current_job(r: redis.Redis, keys: Keys, identity: str, slot: int,
                queues: Sequence[str], job: Running | None = None) -> Reservation | None:
    """The job the slot runs (or ran when it died).

    With ``job`` (what the slot table says the worker was running: running.py): the
    reservation of that very job, or None. Without: the earliest reservation. Not the first
    of its jid: a batch's finished jobs stay reserved until their ack goes out, and two jobs
    may share a jid (rt2 finding 5); charging another with its crash or timeout was wrong."""
    key = keys.reserved(identity, slot)
    if job is None:
        members = r.zrange(key, 0, 0)
        return Reservation(members[0], *split_member(members[0])) if members else None
    return running_mod.reservations(r, key, [job]).get(job)


def _reservations(r: redis.Redis, keys: Keys, identity: str, slot: int,
                  jobs: Sequence[Running]) -> dict[Running, Reservation]:
    """The reservations of the jobs a slot ran, read in one call: those found."""
    return running_mod.reservations(r, keys.reserved(identity, slot), jobs)


def fail_reservation(r: redis.Redis, keys: Keys, identity: str, slot: int, res: Reservation,
                     kind: str, score: float, payload: str, dead_timeout: int,
                     dead_max_jobs: int, task: tracking.Move | None = None) -> int:
    """The failure path for a job whose worker can no longer run it (killed at its timeout, or
    a poison pill): the same atomic write the worker itself uses, with the job's move in its
    task if it has one. WRITTEN, GONE or REFUSED."""
    ks, args = failure_call(keys, keys.reserved(identity, slot), res.member, kind, score,
                            payload, dead_timeout, dead_max_jobs, task=task)
    return int(FAIL(r, ks, args))


def write_held(r: redis.Redis, keys: Keys, identity: str, config, held: Held) -> bool:
    """Try again to write a failure that was refused; True once it is settled (written, or
    the job is gone: recovered by another master)."""
    res = Reservation(held.member, *split_member(held.member))
    return fail_reservation(r, keys, identity, held.slot, res, held.kind, held.score,
                            held.payload, config.dead_timeout_in_seconds,
                            config.dead_max_jobs, held.task) != REFUSED


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
        moved, stuck = _requeue(r, keys, identity, identity, slots, queues)
        if stuck:
            # The registration stays (requeue.lua), so the next beat tries again.
            log.error("master %s: %d job(s) cannot be put back: their queue key and %s both "
                      "hold another Redis type (WRONGTYPE); kept until the keys are fixed",
                      identity, stuck, keys.dead)
        if moved >= 0:
            reaped.append((identity, moved))
    return reaped


def settle(r: redis.Redis, keys: Keys, identity: str, config, slot: int, *, code: int,
           reason: str, running_jid: str = "", timeout: float = 0.0,
           running: Sequence[Running] = (), culprits: dict[Running, Charge] | None = None,
           ignored: str = "SIGALRM", app=None) -> Settled:
    """After a worker exited: everything its slot holds goes back to the head of its queue,
    except what the jobs it was running (``running``, as its slot records name them:
    running.py; or the one ``running_jid``) earned:

    - the master killed it for a timeout: each job in ``culprits`` (its Charge; by default
      the one running job, charged ``timeout``) takes the failure path (JobTimeout); the
      others that were running are bystanders and go back as they were, no retry spent;
    - it crashed running one job: that job is the culprit, it goes back carrying one more
      crash, and to dead (a poison pill) once it has killed ``max_crashes`` workers;
    - it crashed running several (a worker of many jobs at once): none is known to be the
      culprit, and charging each would bury innocent jobs. Each goes back marked a suspect
      (payload.SUSPECT), and runs next alone in its worker (dispatch.py), where a crash is
      its own and counts;
    - it stopped (shutdown, replaced, silent, exit): everything goes back as it was.

    Safe to call again after an error: it starts from what Redis holds. Raises Stuck (see
    requeue_slot) and Redis errors. ``app``: where job classes and error handlers are looked
    up (server/loader.py's AppView; the live registries by default)."""
    running = tuple(j for j in running if j.jid) or (
        (Running(running_jid),) if running_jid else ())
    if culprits is None:
        culprits = {j: Charge(timeout) for j in running[:1]} if reason == "timeout" else {}
    replace: dict[bytes, str | bytes] = {}
    failed, held = 0, []
    if reason == "timeout" or (reason == "crash" and len(running) == 1):
        found = _reservations(r, keys, identity, slot, [*culprits, *running])
        for job in (culprits if reason == "timeout" else running):
            current = found.get(job)
            if current is None:
                continue
            hit, stuck, again = _settle_running(r, keys, identity, config, slot, current,
                                                code, reason, culprits.get(job, Charge(0.0)),
                                                ignored, app)
            failed += hit
            if stuck is not None:
                held.append(stuck)
            if again is not None:
                replace[current.member] = again
    elif reason == "crash":
        replace = _suspects(r, keys, identity, config, slot, running, code)
    keep = [h.member for h in held]
    return Settled(requeue_slot(r, keys, identity, slot, config.queue_names, replace, keep),
                   failed, tuple(held))


def _suspects(r, keys, identity, config, slot, running: Sequence[Running],
              code: int) -> dict[bytes, str | bytes]:
    """Payloads to requeue the jobs running in a crash of many jobs with: marked suspects."""
    replace: dict[bytes, str | bytes] = {}
    for current in _reservations(r, keys, identity, slot, running).values():
        try:
            msg = codec.loads(current.payload)
            codec.validate(msg)
        except PayloadError:
            continue
        replace[current.member] = codec.with_field(current.payload, msg, codec.SUSPECT, 1)
    if replace:
        log.warning("worker %d %s with %d jobs running: none is known to be the culprit, so "
                    "none is charged; each goes back a suspect and runs next alone, where a "
                    "crash is its own: %s", slot, describe_status(code), len(running),
                    ", ".join(j.jid for j in running))
    return replace


def _settle_running(r, keys, identity, config, slot, current: Reservation, code: int,
                    reason: str, charge: Charge, ignored: str = "SIGALRM", app=None):
    """(1 if it failed else 0, held or None, payload to requeue it with or None)."""
    try:
        msg = codec.loads(current.payload)
        codec.validate(msg)
    except PayloadError:
        return 0, None, None  # requeued with the rest; the next worker rejects it to dead
    if reason == "timeout":
        exc: BaseException = JobTimeout(_timeout_message(msg, charge, ignored, config))
    else:
        crashes = codec.crash_count(msg) + 1
        log.warning("class=%s jid=%s killed its worker (%s), crash %d of %d", msg["class"],
                    msg["jid"], describe_status(code), crashes, config.max_crashes)
        if crashes < config.max_crashes:
            _mark_killed(r, keys, msg, f"its worker was {describe_status(code)} (crash "
                                       f"{crashes} of {config.max_crashes}); it runs again")
            return 0, None, codec.with_field(current.payload, msg, codec.CRASHES, crashes)
        exc = WorkerKilled(f"{msg['class']} killed its worker {crashes} times "
                           f"(last: {describe_status(code)}); sent to dead as a poison pill")
    lookup = registry.lookup if app is None else app.lookup
    cls = lookup(activejob.job_name(msg) if activejob.is_wrapped(msg) else msg["class"])
    if reason == "timeout":
        outcome = retry.decide(msg, exc, current.queue, job_class=cls,
                               max_retries=config.max_retries, backtrace_lines=[])
    else:
        outcome = retry.kill(msg, exc, current.queue, job_class=cls)
    task = tracking.failure(tracking.task_id_of(msg), outcome.msg, outcome.kind != "retry", exc)
    written = fail_reservation(r, keys, identity, slot, current, outcome.kind, outcome.score,
                               outcome.payload, config.dead_timeout_in_seconds,
                               config.dead_max_jobs, task)
    held = None
    if written == REFUSED:
        held = Held(slot, current.member, outcome.kind, outcome.score, outcome.payload, task)
        log.error("class=%s jid=%s %s -> %s, but %s holds another Redis type (WRONGTYPE): the "
                  "job stays reserved until the key is fixed", msg["class"], msg["jid"], exc,
                  outcome.kind, keys.retry if outcome.kind == "retry" else keys.dead)
    elif written == WRITTEN:
        log.error("class=%s jid=%s %s -> %s", msg["class"], msg["jid"], exc, outcome.kind)
        if outcome.kind != "retry":
            # (a unique job that died: its lock goes, issue 21)
            unique.release(r, keys, [msg], current.queue)
    else:
        return 0, None, None  # recovered by another master meanwhile: it runs there
    (events.report if app is None else app.report)(
        exc, {"job": msg, "queue": current.queue, "outcome": outcome.kind})
    return 1, held, None


def _timeout_message(msg: dict, charge: Charge, ignored: str, config) -> str:
    if charge.timeout:
        # ("did not stop at", not "ignored": a JobTimeout due while the job is inside a
        # guarded section, a Redis command or a log write, waits until it is out: RT5 #4)
        return (f"{msg['class']} ran past its {charge.timeout:g}s timeout and did not stop at "
                f"{ignored}; its worker was killed after {config.timeout_grace:g}s more")
    # (no limit of its own: it held the event loop, past the limits of the jobs waiting on it)
    return (f"{msg['class']} blocked its worker's event loop for {charge.blocked:.1f}s (an "
            f"async job must await, never block), past the time limits of the async jobs "
            f"waiting on it; its worker was killed")


def _mark_killed(r: redis.Redis, keys: Keys, msg: dict, message: str) -> None:
    """A job of a task whose worker died under it shows as an error waiting for its retry
    until it runs again (written before the job goes back, so its next start comes after)."""
    task_id = tracking.task_id_of(msg)
    if task_id is None:
        return
    err = tracking.error_json("WorkerKilled", message, final=False)
    tracking.mark(r, keys, tracking.Move(task_id, str(msg["jid"]), "retry", err))


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
