"""The periodic jobs as every master, ``queuedctl cron`` and the dashboard's Cron page see them in
Redis (sidekiq-cron's ``cron_jobs`` / ``cron_job:<name>``): each one's schedule and clock,
class, queue, next and last run and status; push one now; disable or enable one. The command
(cron.py) and the page (web/pages_cron.py) both call these, so they say the same.

The status written here is the operator's and survives restarts and deploys (the masters'
cron_sync.lua keeps it) until a deploy changes the schedule's ``enabled:`` in the file. A
disabled schedule is skipped by cron_enqueue.lua at its ticks; ``enqueue_now`` pushes it anyway
(an operator asking for one run now means it).

A schedule is named by its key, ``cron_job:<name>`` (the member of ``cron_jobs``), never by the
hash's ``name`` field, and its name is read and written as the exact bytes (names.py): a row
took its name from the field, and a hash whose field said another name acted on that other
schedule; a name that is not UTF-8, read with ``replace``, named none (red team RT1, finding 9).
"""
from __future__ import annotations

import datetime as dt
import json
import time

import redis as redis_lib

from ..cronspec import Timing, parse_cron, parse_every
from ..keys import Keys
from ..payload import new_jid, no_queue, queue_of
from ..periodic import enqueue, stamp
from ..values import Invalid
from . import ctltext
from .names import name_of, to_key

STATUSES = ("enabled", "disabled")


class NoSuchJob(LookupError):
    """No periodic job of that name (or none with a usable message) in Redis."""


class _ExactCronKeys(Keys):
    """Keys whose schedule keys (and the queue it pushes to) are the exact bytes of names read
    with name_of, for queued.periodic.enqueue."""

    __slots__ = ()

    def cron_job(self, name: str) -> bytes:  # type: ignore[override]
        return to_key(super().cron_job(name))

    def cron_enqueued(self, name: str) -> bytes:  # type: ignore[override]
        return to_key(super().cron_enqueued(name))

    def cron_history(self, name: str) -> bytes:  # type: ignore[override]
        return to_key(super().cron_history(name))

    def queue(self, name: str) -> bytes:  # type: ignore[override]
        return to_key(super().queue(name))


def _text(raw: dict, field: str) -> str:
    return name_of(raw.get(field.encode(), b""))


def _name(member: str) -> str:
    """A schedule's name, from its member of cron_jobs (``cron_job:<name>``)."""
    return member[len(Keys.cron_member("")):] if member.startswith(Keys.cron_member("")) \
        else member


def _last_run(raw: dict) -> float | None:
    text = _text(raw, "last_enqueue_time")
    for fmt in ("%Y-%m-%d %H:%M:%S %z", "%Y-%m-%dT%H:%M:%S%z"):
        try:
            return dt.datetime.strptime(text, fmt).timestamp()
        except ValueError:
            continue
    return None


def _timing(raw: dict) -> Timing | None:
    """From queued's own fields, else sidekiq-cron's ``cron`` (a schedule Ruby wrote)."""
    kind, timing = _text(raw, "queued_kind"), _text(raw, "queued_timing")
    try:
        if kind == "every":
            return parse_every(timing)
        return parse_cron(timing or _text(raw, "cron"))
    except Invalid:
        return None


def clock(timing: Timing | None) -> str:
    """Which clock the ticks follow: "UTC", a zone, or "every" seconds from the epoch (the
    startup line says the same: Timing.zone_note)."""
    if timing is None:
        return "-"
    if timing.kind == "every":
        return "epoch-aligned"
    return timing.zone or "UTC"


def _queue(raw: dict) -> str:
    """The queue its runs go to: its message's (an empty one is shown ``""``, as enqueue_now
    writes it), "default" when the message names none."""
    try:
        queue = json.loads(_text(raw, "message")).get("queue", "default")
    except (ValueError, AttributeError):
        return "default"
    return queue if isinstance(queue, str) else json.dumps(queue)


def schedules(r: redis_lib.Redis, keys: Keys, now: float | None = None) -> list[dict]:
    """Every periodic job, by name: name, kind (cron or every), schedule (as written), zone
    (clock), class, queue, status, last_run and next_run (epoch; no next run while
    disabled), description, defined_by."""
    now = time.time() if now is None else now
    members = sorted(name_of(m) for m in r.smembers(keys.cron_jobs))
    pipe = r.pipeline(transaction=False)
    for member in members:
        pipe.hgetall(to_key(keys.ns + member))
    rows = []
    for member, raw in zip(members, pipe.execute()):
        if not raw:
            continue
        status = _text(raw, "status") or "enabled"
        timing = _timing(raw)
        rows.append({
            "name": _name(member),
            "kind": timing.kind if timing else "cron",
            "schedule": _text(raw, "queued_timing") or _text(raw, "cron"),
            "zone": clock(timing),
            "class": _text(raw, "klass"), "queue": _queue(raw), "status": status,
            "last_run": _last_run(raw),
            "next_run": timing.next_after(now) if timing and status == "enabled" else None,
            "description": _text(raw, "description"),
            "defined_by": _text(raw, "queued_where") or "sidekiq-cron"})
    return rows


def _find(r: redis_lib.Redis, keys: Keys, name: str) -> dict:
    raw = r.hgetall(to_key(keys.cron_job(name)))
    if not raw:
        raise NoSuchJob(f"no periodic job named {name!r} (queuedctl cron lists them)")
    return raw


def enqueue_now(r: redis_lib.Redis, keys: Keys, name: str) -> dict:
    """Push one run of ``name`` now, whatever its status; the payload pushed."""
    raw = _find(r, keys, name)
    try:
        template = json.loads(_text(raw, "message"))
        template["class"], template.setdefault("queue", "default")
    except (ValueError, KeyError, TypeError):
        raise NoSuchJob(f"periodic job {name!r} has no usable message in Redis") from None
    if queue_of(template) is None:  # ("" or null: pushed nowhere, F4 #3; job-states.md)
        raise NoSuchJob(f"periodic job {name!r} was not pushed: {no_queue(template)}")
    now = time.time()
    msg = stamp(template, name, None, now, new_jid())
    try:
        answer = enqueue(r, _ExactCronKeys(keys.ns[:-1] or None), name, msg, now)
    except UnicodeEncodeError:  # (its message names a queue no UTF-8 holds)
        raise NoSuchJob(f"periodic job {name!r} names a queue that cannot be written: "
                        f"{msg['queue']!r}") from None
    if answer != "enqueued":
        raise NoSuchJob(f"periodic job {name!r} was not pushed ({answer})")
    return msg


def set_status(r: redis_lib.Redis, keys: Keys, name: str, status: str) -> str:
    """Set ``name`` enabled or disabled; the status it had."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
    before = _text(_find(r, keys, name), "status") or "enabled"
    r.hset(to_key(keys.cron_job(name)), "status", status)
    return before


# --- what the command and the page say -------------------------------------------------------

def pushed_text(name: str, msg: dict) -> str:
    return (f"pushed {ctltext.name(msg['class'])} jid={msg['jid']} to queue "
            f"{ctltext.name(msg['queue'])} (periodic job {name})")


def status_text(name: str, before: str, status: str) -> str:
    if before == status:
        return f"periodic job {name} was already {status}"
    return f"periodic job {name} {status}: " + (
        "no master pushes it at its ticks until it is enabled again"
        if status == "disabled" else "pushed again from its next tick")
