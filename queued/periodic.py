"""Periodic jobs, the part the daemon and the operator's tools share: what a schedule is (parsed
from sidekiq-scheduler's ``:scheduler: :schedule:`` dialect or declared with
``@queued.periodic``), when its ticks fall, the job each tick pushes, and the one Lua step
(queued/lua/cron_enqueue.lua) that pushes it at most once per tick whatever the number of
masters. The daemon's loop is in server/periodic.py, ``queuedctl cron`` in admin/cron.py.

Timing. ``cron:`` takes 5 fields, or 6 with seconds first (fugit's and sidekiq-scheduler's
order), an optional time zone as the last word (``0 9 * * * Europe/Berlin``) and the @daily
shorthands; croniter evaluates them (imported when first needed, so a producer that never
parses a schedule does not pay for it). Without a zone an expression is in UTC, not in the
host's zone as with sidekiq-scheduler: hosts whose zones differ would disagree on the ticks,
and the one-job-per-tick promise rests on every master computing the same ones. On a DST
change the rules are Debian cron's: a time skipped by spring-forward runs at the jump (02:30
runs at 03:00), and on fall-back a fixed-time job (minute and hour fields not starting with
``*``) runs once, at the first of the two 02:30s, while ``*``-jobs run in both hours.
``every:`` (``30s``, ``5m``, ``1h30m``, ``1d``, a number of seconds) ticks at multiples of
the interval since the Unix epoch rather than from the process's start (rufus-scheduler's
way), again so that every master agrees without talking to the others.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import re
from typing import Any, Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .connection import Script
from .keys import Keys
from .payload import dumps
from .values import Invalid, expected, show

UTC = dt.timezone.utc
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
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_ZONE_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$")


def _croniter() -> Any:
    from croniter import croniter  # noqa: PLC0415 - see the module header
    return croniter


# --- timing ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Timing:
    """When a schedule's ticks fall: ``cron`` fields (and zone), or ``every`` seconds."""

    text: str                    # as written, for messages and the listing
    kind: str                    # "cron" or "every"
    expr: str = ""               # the cron fields, zone removed
    zone: str | None = None
    seconds: float = 0.0         # every:
    fixed: bool = False          # cron: minute and hour fixed (see the DST rules above)

    def _tz(self) -> dt.tzinfo:
        return ZoneInfo(self.zone) if self.zone else UTC

    def _iter(self, start: float) -> Any:
        return _croniter()(self.expr, dt.datetime.fromtimestamp(start, self._tz()),
                           ret_type=dt.datetime, second_at_beginning=True)

    def _repeat(self, tick: dt.datetime) -> bool:
        """A fixed-time job's tick at the second of two equal local times (fall-back)."""
        if not (self.fixed and self.zone):
            return False
        wall = tick.replace(tzinfo=None)
        first = wall.replace(tzinfo=tick.tzinfo, fold=0).utcoffset()
        second = wall.replace(tzinfo=tick.tzinfo, fold=1).utcoffset()
        return first != second and tick.utcoffset() == second

    def next_after(self, t: float) -> float:
        """The first tick after ``t`` (epoch seconds)."""
        if self.kind == "every":
            return (math.floor(t / self.seconds) + 1) * self.seconds
        it = self._iter(t)
        while True:
            tick = it.get_next(dt.datetime)
            if not self._repeat(tick):
                return tick.timestamp()

    def latest(self, t: float) -> float:
        """The last tick at or before ``t``."""
        if self.kind == "every":
            return math.floor(t / self.seconds) * self.seconds
        it = self._iter(math.floor(t) + 1.0)  # get_prev is strictly before; ticks are whole s
        while True:
            tick = it.get_prev(dt.datetime)
            if not self._repeat(tick):
                return tick.timestamp()

    def cron_text(self) -> str:
        """The ``cron`` field of sidekiq-cron's hash: the expression as written, or for
        ``every`` the six-field expression with the same ticks when there is one (sidekiq-cron's
        Web UI parses the field), else ``every 90s``."""
        if self.kind == "cron":
            return self.text
        s = self.seconds
        if s == int(s) and s < 60 and 60 % s == 0:
            return f"*/{int(s)} * * * * *" if s > 1 else "* * * * * *"
        if s % 60 == 0 and s < 3600 and 3600 % s == 0:
            return f"0 */{int(s // 60)} * * * *"
        if s % 3600 == 0 and s < 86400 and 86400 % s == 0:
            return f"0 0 */{int(s // 3600)} * * *"
        if s == 86400:
            return "0 0 0 * * *"
        return f"every {self.text}"


def _zone_word(word: str) -> str | None:
    """"strict" for a word that can only be meant as a zone (Area/City), "maybe" for a word
    that is a zone if zoneinfo knows it (UTC, EST; MON is a day), else None."""
    if not _ZONE_WORD.match(word):
        return None
    return "strict" if "/" in word else "maybe"


def _loads(zone: str) -> bool:
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def parse_cron(value: Any) -> Timing:
    if not isinstance(value, str) or not value.strip():
        raise expected("a cron expression such as '*/5 * * * *' or '0 9 * * * Europe/Berlin'",
                       value)
    words = value.split()
    zone = None
    kind = _zone_word(words[-1]) if len(words) > 1 else None
    if kind == "strict" or (kind == "maybe" and _loads(words[-1])):
        zone = words.pop()
        if not _loads(zone):
            raise Invalid(f"unknown time zone {zone!r} in {value!r} (an IANA name such as "
                          "Europe/Berlin or UTC)")
    expr = " ".join(words)
    timing = Timing(value, "cron", expr=expr, zone=zone, fixed=_fixed(words))
    try:
        timing.next_after(0.0 if zone is None else 86400.0)
    except (ValueError, KeyError, TypeError) as exc:  # croniter's errors are ValueErrors
        raise Invalid(f"not a valid cron expression: {value!r} ({exc})") from None
    return timing


def _fixed(words: list[str]) -> bool:
    if words[0].startswith("@"):
        return words[0] != "@hourly"
    minute, hour = (words[1], words[2]) if len(words) >= 6 else (words[0], words[1])
    return not (minute.startswith("*") or hour.startswith("*"))


def parse_every(value: Any) -> Timing:
    what = "an interval such as '30s', '5m', '1h30m', '1d' or a number of seconds"
    if isinstance(value, list):
        if len(value) == 2 and isinstance(value[1], dict) and value[1]:
            raise Invalid(f"options {sorted(map(str, value[1]))} are not supported: queued "
                          "aligns every: ticks to the clock so that all masters agree "
                          "(see docs/periodic.md)")
        if not 1 <= len(value) <= 2 or (len(value) == 2 and value[1] not in ({}, None)):
            raise expected(what, value)
        value = value[0]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds, text = float(value), f"{value:g}s"
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        parts = _DURATION.findall(text.replace(" ", ""))
        if "".join(n + u for n, u in parts) != text.replace(" ", ""):
            raise expected(what, value)
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise expected(what, value)
    if not math.isfinite(seconds) or seconds < 1:
        raise expected(f"{what}, at least 1s", value)
    return Timing(text, "every", seconds=seconds)


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
                    queue=fields.get("queue"), args=_args(found.get("args")),
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
    except Invalid as exc:
        raise ValueError(f"@queued.periodic: {exc}") from None

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
    that tick is not pushed yet and the schedule is enabled. Returns the script's answer:
    enqueued, done, disabled, missing (no such schedule in Redis) or wrongtype."""
    msg = {**msg, "enqueued_at": now}
    history = dumps({"jid": msg["jid"], "enqueued": last_time_text(now)})
    reply = CRON_ENQUEUE(r, [keys.cron_job(name), keys.cron_enqueued(name),
                             keys.cron_history(name), keys.queue(msg["queue"]), keys.queues],
                         ["" if tick is None else repr(tick),
                          "" if tick is None else tick_member(tick), dumps(msg), msg["queue"],
                          last_time_text(now), history, HISTORY,
                          repr((tick or now) - REMEMBER)])
    return reply.decode() if isinstance(reply, bytes) else str(reply)
