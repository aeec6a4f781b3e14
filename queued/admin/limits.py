"""Rate limiters, the operator's side (issue 21): each limiter's definition, its use now and
its counts, as ``queuedctl limits`` and the dashboard's Limits page show them.

Read only from what the limiters' scripts write (queued/lua/limit_*.lua): the index of limiters
(each name scored by its last use), each one's hash (``def``, held, waited, wait_ms, overlimit,
rescheduled, reclaimed) and state. "In use" is read with Redis's clock: the leases not yet
ended (concurrent), the count of the current calendar bucket, the grants inside the window, the
leaky bucket's level drained to now. Two pipelines, however many limiters are shown.

Any client can write anything at these keys: a limiter whose key holds another type, whose
definition or counts are not what the scripts write, is listed all the same, with what is odd
about it in ``trouble`` (one such key made ``queuedctl limits`` and the Limits page fail whole).
A name that is not UTF-8 is read as names.py reads every name, so its own keys are read.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import redis as redis_lib

from ..keys import Keys
from .names import name_of, to_key

#: Limiters shown at most (the most recently used first): per-customer limiters can be many.
SHOWN = 1000
_COUNTS = ("held", "waited", "wait_ms", "overlimit", "rescheduled", "reclaimed")


@dataclass(frozen=True)
class LimiterInfo:
    name: str
    kind: str
    size: int
    definition: dict
    in_use: float       # units held now (concurrent), granted in this bucket/window, level
    parked: int         # concurrent: jobs parked until a release
    last_used: float | None
    counts: dict = field(default_factory=dict)
    #: What is odd about it ("" when nothing): a key of another type, a definition or a
    #: count that is not what queued writes.
    trouble: str = ""

    @property
    def waited(self) -> int:
        return self.counts.get("waited", 0)

    @property
    def overlimit(self) -> int:
        return self.counts.get("overlimit", 0)

    def as_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "size": self.size,
                "definition": self.definition, "in_use": self.in_use, "parked": self.parked,
                "last_used": self.last_used, **{k: self.counts.get(k, 0) for k in _COUNTS},
                "trouble": self.trouble or None}


class Limits:
    def __init__(self, r: redis_lib.Redis, keys: Keys):
        self.r = r
        self.keys = keys

    def count(self) -> int:
        return int(self.r.zcard(self.keys.limiters))

    def all(self, limit: int = SHOWN) -> list[LimiterInfo]:
        """The most recently used limiters (``limit`` at most), by name."""
        rows = self.r.zrevrange(self.keys.limiters, 0, limit - 1, withscores=True)
        found = self._read([(name_of(n), score) for n, score in rows])
        return sorted(found, key=lambda info: info.name)

    def get(self, name: str) -> LimiterInfo | None:
        score = self.r.zscore(self.keys.limiters, to_key(name))
        found = self._read([(name, score)])
        return found[0] if found and (found[0].kind or found[0].trouble) else None

    def forget(self, name: str) -> bool:
        """Drop a limiter's keys and counts (its next use makes them anew); False if it was
        not known. Units held now are forgotten too: use it on a limiter nobody uses."""
        parts = ["", "leases", "wake", "parked", "state"]
        pipe = self.r.pipeline(transaction=True)
        pipe.zrem(self.keys.limiters, to_key(name))
        pipe.unlink(*(self._key(name, part) for part in parts))
        return pipe.execute()[0] == 1

    def _key(self, name: str, part: str = "") -> bytes:
        return to_key(self.keys.limiter(name, part))

    def _read(self, names: list[tuple[str, float | None]]) -> list[LimiterInfo]:
        if not names:
            return []
        secs, micros = self.r.time()
        now = secs + micros / 1e6
        pipe = self.r.pipeline(transaction=False)
        for name, _ in names:
            pipe.hgetall(self._key(name))
        hashes = pipe.execute(raise_on_error=False)
        pipe = self.r.pipeline(transaction=False)
        defs = []
        for (name, _), h in zip(names, hashes):
            d = _definition(h.get(b"def")) if isinstance(h, dict) else {}
            defs.append(d)
            self._ask_use(pipe, name, d, now)
        answers = iter(pipe.execute(raise_on_error=False))
        return [self._info(name, last, h, d, answers, now)
                for (name, last), h, d in zip(names, hashes, defs)]

    def _info(self, name: str, last: float | None, h, d: dict, answers,
              now: float) -> LimiterInfo:
        """One limiter as read, whatever its keys hold (what is odd goes in ``trouble``)."""
        troubles = []
        if not isinstance(h, dict):
            troubles.append(f"{_shown(self._key(name))} is not a limiter's hash ({h})")
            h = {}
        elif h and not d:
            troubles.append("its definition is not what queued writes")
        try:
            in_use, parked = self._use(answers, d, now)
        except (redis_lib.ResponseError, TypeError, ValueError, OverflowError) as e:
            in_use, parked = 0, 0
            troubles.append(f"its state cannot be read ({e})")
        counts = {}
        for k in _COUNTS:
            raw = h.get(k.encode())
            if raw is not None:
                value = _whole(raw)
                if value is None:
                    troubles.append(f"its count {k!r} is not a whole number ({_shown(raw)})")
                else:
                    counts[k] = value
        size = _whole(d.get("size") or 0)
        if size is None:
            troubles.append(f"its size is not a whole number ({d.get('size')!r})")
        troubles += _odd_spans(d)
        kind = d.get("kind")
        return LimiterInfo(name, kind if isinstance(kind, str) else "", size or 0, d, in_use,
                           parked, last, counts, "; ".join(troubles))

    def _ask_use(self, pipe, name: str, d: dict, now: float) -> None:
        kind = d.get("kind")
        state = self._key(name, "state")
        if kind == "concurrent":
            pipe.zcount(self._key(name, "leases"), f"({now}", "+inf")
            pipe.zcard(self._key(name, "parked"))
        elif kind == "window":
            pipe.zcount(state, f"({now - _length(d)}", "+inf")
        elif kind == "bucket":
            pipe.hmget(state, "bucket", "count")
        elif kind == "leaky":
            pipe.hmget(state, "level", "at")

    def _use(self, answers, d: dict, now: float) -> tuple[float, int]:
        """Reads exactly the answers _ask_use asked for (an error answer is raised here, once
        they are all taken: the next limiter's come after)."""
        kind = d.get("kind")
        if kind == "concurrent":
            leases, parked = next(answers), next(answers)
            return int(_ok(leases)), int(_ok(parked))
        if kind == "window":
            return int(_ok(next(answers))), 0
        if kind == "bucket":
            bucket, count = _ok(next(answers))
            length = _length(d)
            current = math.floor(now / length) * length if length else None
            return (int(count) if bucket is not None and float(bucket) == current else 0), 0
        if kind == "leaky":
            level, at = _ok(next(answers))
            if level is None:
                return 0, 0
            rate = (_whole(d.get("size") or 0) or 0) / (_length(d) or 1)
            return round(max(0.0, float(level) - max(0.0, now - float(at)) * rate), 3), 0
        return 0, 0


def _length(d: dict) -> float:
    from ..limiter import INTERVALS  # (the definitions' names: one table)
    interval = d.get("interval")
    if isinstance(interval, str):
        return float(INTERVALS.get(interval, 0))
    if isinstance(interval, bool) or not isinstance(interval, (int, float)):
        return 0.0
    return float(interval) if math.isfinite(interval) else 0.0


def _odd_spans(d: dict) -> list[str]:
    """What is odd about a definition's spans (shown as "?" where they are)."""
    from ..limiter import INTERVALS
    kind, out = d.get("kind"), []
    spans = {"concurrent": "lock_timeout", "window": "interval", "leaky": "interval"}
    if kind in spans and not is_seconds(d.get(spans[kind])):
        out.append(f"its {spans[kind]} is not a number of seconds ({d.get(spans[kind])!r})")
    if kind == "bucket" and d.get("interval") not in INTERVALS:
        out.append(f"its interval is not one of {', '.join(INTERVALS)} "
                   f"({d.get('interval')!r})")
    return out


def is_seconds(value) -> bool:
    """A span a definition may hold: a finite number (not a bool)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _ok(answer):
    """A pipeline's answer, raised if it was an error (WRONGTYPE)."""
    if isinstance(answer, Exception):
        raise answer
    return answer


def _whole(value) -> int | None:
    """A count as queued writes it (a whole number, as text or not), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _shown(raw: bytes | str) -> str:
    """Bytes from Redis as text for a message (a byte that is not UTF-8 as \\xff)."""
    if isinstance(raw, str):
        return raw
    return raw.decode("utf-8", "backslashreplace")


def _definition(raw: bytes | None) -> dict:
    try:
        d = json.loads(raw) if raw else {}
    except ValueError:
        d = {}
    return d if isinstance(d, dict) else {}
