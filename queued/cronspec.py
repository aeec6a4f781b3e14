"""When a periodic job's ticks fall: cron expressions (croniter) and every: intervals.

``cron:`` takes 5 fields, or 6 with seconds first (fugit's and sidekiq-scheduler's
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
import re
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .values import Invalid, expected

UTC = dt.timezone.utc
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

    def zone_note(self) -> str:
        """Which clock the ticks follow, for the startup line: sidekiq-scheduler's users
        expect the host's local time, and queued's default is UTC (see the module header)."""
        if self.kind == "every":
            return "every master aligned to the epoch"
        return f"time zone {self.zone}" if self.zone else "in UTC, not the host's zone"

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
    _check_fields(words, value)
    timing = Timing(value, "cron", expr=expr, zone=zone, fixed=_fixed(words))
    try:
        timing.next_after(0.0 if zone is None else 86400.0)
    except (ValueError, KeyError, TypeError) as exc:  # croniter's errors are ValueErrors
        raise Invalid(f"not a valid cron expression: {value!r} ({exc}); the fields are "
                      f"{_FIELD_LIST}") from None
    return timing


#: (name, lowest, highest) of each cron field, seconds first when there are six.
_FIELDS = (("second", 0, 59), ("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31),
           ("month", 1, 12), ("day of week", 0, 7))
_FIELD_LIST = ("[second] minute hour day-of-month month day-of-week (second 0-59, minute 0-59, "
               "hour 0-23, day of month 1-31, month 1-12 or JAN-DEC, day of week 0-7 or SUN-SAT)")
_NUMERIC_PART = re.compile(r"^(\*|\d+)(?:-(\d+))?(?:/(\d+))?$")


def _check_fields(words: list[str], value: str) -> None:
    """Name the field and its range for the mistakes people make (croniter's own message is
    "[61 * * * *] is not acceptable, out of range"). Parts that are not plain numbers (names,
    L, W, #) are left to croniter."""
    if words[0].startswith("@"):
        return
    if len(words) not in (5, 6):
        raise Invalid(f"not a valid cron expression: {value!r} (it has {len(words)} fields; "
                      f"cron takes 5, or 6 with seconds first: {_FIELD_LIST})")
    fields = _FIELDS if len(words) == 6 else _FIELDS[1:]
    for word, (name, low, high) in zip(words, fields):
        for part in word.split(","):
            m = _NUMERIC_PART.match(part)
            if m is None:
                continue
            start, end, step = m.groups()
            for number in (start, end):
                if number not in (None, "*") and not low <= int(number) <= high:
                    raise Invalid(f"not a valid cron expression: {value!r} ({name} field "
                                  f"{word!r}: {number} is out of range, {name} is {low}-{high})")
            if step is not None and int(step) == 0:
                raise Invalid(f"not a valid cron expression: {value!r} ({name} field "
                              f"{word!r}: a step of 0; */N needs N of 1 or more)")


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
