"""Periodic jobs, the part the daemon and the operator's tools share: what a schedule is (parsed
from sidekiq-scheduler's ``:scheduler: :schedule:`` dialect or declared with
``@queued.periodic``), when its ticks fall, the job each tick pushes, and the one Lua step
(queued/lua/cron_enqueue.lua) that pushes it at most once per tick whatever the number of
masters. The daemon's loop is in server/periodic.py, ``queuedctl cron`` in admin/cron.py.
(when ticks fall: queued/cronspec.py)
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from typing import Any, Callable

from .connection import Script
from .cronspec import UTC, Timing, parse_cron, parse_every
from .keys import Keys
from . import expiry
from .payload import dumps
from .values import Invalid, expected, show

#: Keys of one schedule entry. sidekiq-scheduler's, plus queued's ``catch_up``.
ENTRY_KEYS = ("cron", "every", "class", "queue", "args", "description", "enabled", "catch_up",
              "include_metadata", "rails_env", "keyword_argument")
#: sidekiq-scheduler's keys queued does not do, and why (an error, never dropped silently).
REFUSED = {
    "interval": "counts from the last enqueue on one host; use every: (ticks every master "
                "agrees on)",
    "at": "one-off schedules are not periodic jobs; push the job with perform_at",
    "in": "one-off schedules are not periodic jobs; push the job with perform_in",
}
#: Keys of ``:scheduler:`` itself.
SCHEDULER_KEYS = ("schedule", "enabled", "listened_queues_only", "dynamic")


# --- schedules -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Schedule:
    """One periodic job: push ``klass`` with ``args`` to ``queue`` at every tick of ``timing``."""

    name: str
    timing: Timing
    klass: str
    queue: str | None = None     # None: the class's queue, else "default"
    args: tuple = ()
    description: str = ""
    enabled: bool = True
    catch_up: bool = False
    include_metadata: bool = False
    rails_env: tuple[str, ...] = ()
    where: str = ""              # the file key or the Python class that defines it


@dataclasses.dataclass(frozen=True)
class SchedulerOptions:
    """The ``:scheduler:`` block: its options and its schedules."""

    schedule: tuple[Schedule, ...] = ()
    enabled: bool = True
    listened_queues_only: bool = False


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise Invalid("", show(key), unknown=True)
    return key[1:] if key.startswith(":") else key


def _unknown(key: str, known: tuple[str, ...]) -> Invalid:
    import difflib
    close = difflib.get_close_matches(key, known, n=1)
    return Invalid(close[0] if close else "", key, unknown=True)


def _args(value: Any) -> tuple:
    # sidekiq-cron's and sidekiq-scheduler's reading: a list as it is, a mapping as the one
    # argument, anything else as the one argument, nothing as none.
    if value is None:
        return ()
    if isinstance(value, list):
        return tuple(value)
    return (value,)


def _plain(args: tuple) -> tuple:
    """Arguments JSON gives back as they are: YAML's dates and Python's objects would fail at
    every tick, in the master, instead of once at start."""
    try:
        same = json.loads(dumps(list(args))) == list(args)
    except (TypeError, ValueError):
        same = False
    if not same:
        raise Invalid(f"must be plain JSON (strings, numbers, true/false/null, lists, mappings "
                      f"with string keys), got {show(list(args))}", "args")
    return args


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise expected("true or false", value)
    return value


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise expected("a string", value)
    return value


def _queue(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.startswith(":"):
        value = value[1:]
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise expected("a queue name", value)
    return value


def _class(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise expected("a job class name", value)
    return value


def _envs(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, str):
        raise expected("an environment name, or names separated by commas", value)
    return tuple(e for e in value.replace(" ", "").split(",") if e)


def parse_entry(name: str, entry: Any, where: str) -> Schedule:
    """One schedule of the file (``where``: its key, for later messages)."""
    if not isinstance(entry, dict):
        raise expected("a mapping (cron: or every:, class:, ...)", entry)
    found: dict[str, Any] = {}
    for raw, value in entry.items():
        key = _key(raw)
        if key in REFUSED:
            raise Invalid(f"not supported: {REFUSED[key]}", key)
        if key not in ENTRY_KEYS:
            raise _unknown(key, ENTRY_KEYS)
        found[key] = value
    if ("cron" in found) == ("every" in found):
        raise Invalid("give one of cron: or every:")
    try:
        timing = (parse_cron(found["cron"]) if "cron" in found
                  else parse_every(found["every"]))
    except Invalid as exc:
        raise exc.within("cron" if "cron" in found else "every") from None
    if found.get("keyword_argument"):
        raise Invalid("keyword arguments are Ruby's; a Python job takes args as a list",
                      "keyword_argument")
    fields = {}
    for key, parse in (("class", _class), ("queue", _queue), ("description", _text),
                       ("enabled", _flag), ("catch_up", _flag), ("include_metadata", _flag),
                       ("rails_env", _envs)):
        if key in found:
            try:
                fields[key] = parse(found[key])
            except Invalid as exc:
                raise exc.within(key) from None
    return Schedule(name=name, timing=timing, klass=fields.get("class", name),
                    queue=fields.get("queue"), args=_plain(_args(found.get("args"))),
                    description=fields.get("description", ""),
                    enabled=fields.get("enabled", True), catch_up=fields.get("catch_up", False),
                    include_metadata=fields.get("include_metadata", False),
                    rails_env=fields.get("rails_env", ()), where=where)


def _entries(value: Any, where: str) -> tuple[Schedule, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise expected("a mapping of schedule names to schedules", value)
    out = []
    for name, entry in value.items():
        if not isinstance(name, str) or not name:
            raise expected("a schedule name", name)
        try:
            out.append(parse_entry(name, entry, f"{where}.{name}"))
        except Invalid as exc:
            raise exc.within(name) from None
    return tuple(out)


def parse_schedule(value: Any) -> tuple[Schedule, ...]:
    """The older top-level ``:schedule:`` (sidekiq-scheduler 2-4)."""
    return _entries(value, "schedule")


def parse_scheduler(value: Any) -> SchedulerOptions | None:
    """``:scheduler:``: its options and ``:schedule:``."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise expected("a mapping (schedule:, enabled:, listened_queues_only:)", value)
    found = {}
    for raw, item in value.items():
        key = _key(raw)
        if key not in SCHEDULER_KEYS:
            if key in ("dynamic_every", "rufus_scheduler_options"):
                raise Invalid("not supported: the schedule comes from this file and queued "
                              "has no rufus-scheduler threads to tune; remove it", key)
            raise _unknown(key, SCHEDULER_KEYS)
        found[key] = item
    try:
        schedule = _entries(found.get("schedule"), "scheduler.schedule")
    except Invalid as exc:
        raise exc.within("schedule") from None
    if found.get("dynamic"):
        raise Invalid("not supported: the schedule comes from the config file and the code "
                      "(@queued.periodic); remove it", "dynamic")
    for key in ("enabled", "listened_queues_only", "dynamic"):
        if key in found:
            try:
                _flag(found[key])
            except Invalid as exc:
                raise exc.within(key) from None
    return SchedulerOptions(schedule=schedule, enabled=found.get("enabled", True),
                            listened_queues_only=found.get("listened_queues_only", False))


# --- @queued.periodic ---------------------------------------------------------------------------

#: Schedules declared in Python, by name, in declaration order.
declared: dict[str, Schedule] = {}


def periodic(cron: str | None = None, *, every: Any = None, name: str | None = None,
             queue: str | None = None, args: list | tuple = (), description: str = "",
             enabled: bool = True, catch_up: bool = False) -> Callable[[Any], Any]:
    """``@queued.periodic("*/5 * * * *")`` on a ``queued.Job`` subclass or a ``@queued.job``
    function: push it at every tick, once across every master. ``every="30s"`` instead of a
    cron expression; ``name`` defaults to the job's name. Registered when the module is
    imported (the daemon's ``-r``); a bad expression is a ValueError at import."""
    if (cron is None) == (every is None):
        raise TypeError("@queued.periodic takes a cron expression or every=..., not both")
    try:
        timing = parse_cron(cron) if cron is not None else parse_every(every)
        _plain(tuple(args))
    except Invalid as exc:
        raise ValueError(f"@queued.periodic: {exc.sub + ': ' if exc.sub else ''}{exc}") from None

    def decorate(target: Any) -> Any:
        job_class = getattr(target, "job_class", target)
        job_name = getattr(job_class, "queued_name", None)
        if not isinstance(job_class, type) or not job_name:
            raise TypeError("@queued.periodic decorates a queued.Job subclass or a @queued.job "
                            f"function, not {target!r}")
        key = name or job_name
        where = f"@queued.periodic on {job_class.__module__}.{job_class.__qualname__}"
        old = declared.get(key)
        if old is not None and old.where != where:
            raise ValueError(f"schedule {key!r} is declared twice ({old.where} and {where}); "
                             "give one a name=")
        declared[key] = Schedule(name=key, timing=timing, klass=job_name, queue=queue,
                                 args=tuple(args), description=description, enabled=enabled,
                                 catch_up=catch_up, where=where)
        return target
    return decorate


# --- the job each tick pushes ---------------------------------------------------------------------

#: Payload keys that tell which schedule and tick pushed a job (Sidekiq keeps unknown keys).
CRON_FIELD, TICK_FIELD = "cron_name", "cron_tick"


def message(schedule: Schedule, job_class: type | None) -> dict:
    """sidekiq-cron's ``message``: what every tick pushes before its jid and times: the
    class's payload options (Sidekiq's defaults for a class not known here), then class,
    args and queue, as Sidekiq's normalize_item orders them."""
    defaults = (job_class.payload_defaults() if job_class is not None
                else {"retry": True, "queue": "default"})
    msg = {**defaults, "class": schedule.klass, "args": list(schedule.args)}
    if schedule.queue:
        msg["queue"] = schedule.queue
    return msg


def stamp(template: dict, name: str, tick: float | None, now: float, jid: str,
          metadata: bool = False) -> dict:
    """A job from ``template``: which schedule and tick it is, its jid and created_at
    (enqueued_at is added after the client middleware, as a push does)."""
    msg = dict(template)
    msg["args"] = list(msg.get("args") or [])
    if metadata:  # sidekiq-scheduler's include_metadata: one more argument
        msg["args"].append({"scheduled_at": round(tick if tick is not None else now, 3)})
    msg[CRON_FIELD] = name
    if tick is not None:
        msg[TICK_FIELD] = tick
    msg["jid"] = jid
    msg["created_at"] = now
    return msg


# --- Redis ------------------------------------------------------------------------------------------

CRON_ENQUEUE = Script(os.path.join(os.path.dirname(__file__), "lua"), "cron_enqueue")
#: Jobs pushed by a schedule that its ``jid_history`` keeps (sidekiq-cron's default).
HISTORY = 10
#: Ticks remembered in ``cron_job:<name>:enqueued`` (sidekiq-cron's REMEMBER_THRESHOLD).
REMEMBER = 24 * 3600.0
#: A tick may be this far ahead of Redis's clock (seconds): a master's host clock a little fast
#: still pushes; one further ahead is refused (cron_enqueue.lua).
MAX_AHEAD = 1.0
#: sidekiq-cron's last_enqueue_time format (UTC).
LAST_TIME_FORMAT = "%Y-%m-%d %H:%M:%S +0000"


def tick_member(tick: float) -> str:
    """sidekiq-cron's member for a tick in ``cron_job:<name>:enqueued``: ISO 8601 in UTC, so
    a Ruby sidekiq-cron poller on the same Redis skips the ticks queued pushed, and back."""
    return dt.datetime.fromtimestamp(tick, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def last_time_text(when: float) -> str:
    return dt.datetime.fromtimestamp(when, UTC).strftime(LAST_TIME_FORMAT)


def enqueue(r: Any, keys: Keys, name: str, msg: dict, now: float,
            tick: float | None = None) -> str:
    """Push ``msg`` (enqueued_at set here) for schedule ``name``. With a ``tick``, only if
    that tick is not pushed yet, the schedule is enabled and the tick is not ahead of Redis's
    clock. Returns the script's answer: enqueued, done, disabled, missing (no such schedule
    in Redis), wrongtype or ahead."""
    msg = dict(msg)
    if "expires_in" in msg:  # (a class's expires_in: its deadline from this tick, expiry.py)
        expiry.stamp(msg, now)
    msg["enqueued_at"] = now
    history = dumps({"jid": msg["jid"], "enqueued": last_time_text(now)})
    reply = CRON_ENQUEUE(r, [keys.cron_job(name), keys.cron_enqueued(name),
                             keys.cron_history(name), keys.queue(msg["queue"]), keys.queues],
                         ["" if tick is None else repr(tick),
                          "" if tick is None else tick_member(tick), dumps(msg), msg["queue"],
                          last_time_text(now), history, HISTORY,
                          repr((tick or now) - REMEMBER), MAX_AHEAD])
    return reply.decode() if isinstance(reply, bytes) else str(reply)
