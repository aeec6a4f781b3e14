"""Rate limiters, the operator's side (issue 21): each limiter's definition, its use now and
its counts, as ``queuedctl limits`` and the dashboard's Limits page show them.

Read only from what the limiters' scripts write (queued/lua/limit_*.lua): the index of limiters
(each name scored by its last use), each one's hash (``def``, held, waited, wait_ms, overlimit,
rescheduled, reclaimed) and state. "In use" is read with Redis's clock: the leases not yet
ended (concurrent), the count of the current calendar bucket, the grants inside the window, the
leaky bucket's level drained to now. Two pipelines, however many limiters are shown.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import redis as redis_lib

from ..keys import Keys

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

    @property
    def waited(self) -> int:
        return self.counts.get("waited", 0)

    @property
    def overlimit(self) -> int:
        return self.counts.get("overlimit", 0)

    def as_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "size": self.size,
                "definition": self.definition, "in_use": self.in_use, "parked": self.parked,
                "last_used": self.last_used, **{k: self.counts.get(k, 0) for k in _COUNTS}}


class Limits:
    def __init__(self, r: redis_lib.Redis, keys: Keys):
        self.r = r
        self.keys = keys

    def count(self) -> int:
        return int(self.r.zcard(self.keys.limiters))

    def all(self, limit: int = SHOWN) -> list[LimiterInfo]:
        """The most recently used limiters (``limit`` at most), by name."""
        rows = self.r.zrevrange(self.keys.limiters, 0, limit - 1, withscores=True)
        found = self._read([(n.decode("utf-8", "replace"), score) for n, score in rows])
        return sorted(found, key=lambda info: info.name)

    def get(self, name: str) -> LimiterInfo | None:
        score = self.r.zscore(self.keys.limiters, name)
        found = self._read([(name, score)])
        return found[0] if found and found[0].kind else None

    def forget(self, name: str) -> bool:
        """Drop a limiter's keys and counts (its next use makes them anew); False if it was
        not known. Units held now are forgotten too: use it on a limiter nobody uses."""
        parts = ["", "leases", "wake", "parked", "state"]
        pipe = self.r.pipeline(transaction=True)
        pipe.zrem(self.keys.limiters, name)
        pipe.unlink(*(self.keys.limiter(name, part) for part in parts))
        return pipe.execute()[0] == 1

    def _read(self, names: list[tuple[str, float | None]]) -> list[LimiterInfo]:
        if not names:
            return []
        secs, micros = self.r.time()
        now = secs + micros / 1e6
        pipe = self.r.pipeline(transaction=False)
        for name, _ in names:
            pipe.hgetall(self.keys.limiter(name))
        hashes = pipe.execute()
        pipe = self.r.pipeline(transaction=False)
        defs = []
        for (name, _), h in zip(names, hashes):
            d = _definition(h.get(b"def"))
            defs.append(d)
            self._ask_use(pipe, name, d, now)
        answers = iter(pipe.execute())
        out = []
        for (name, last), h, d in zip(names, hashes, defs):
            in_use, parked = self._use(answers, d, now)
            counts = {k: int(h[k.encode()]) for k in _COUNTS if k.encode() in h}
            out.append(LimiterInfo(name, str(d.get("kind", "")), int(d.get("size") or 0), d,
                                   in_use, parked, last, counts))
        return out

    def _ask_use(self, pipe, name: str, d: dict, now: float) -> None:
        kind = d.get("kind")
        state = self.keys.limiter(name, "state")
        if kind == "concurrent":
            pipe.zcount(self.keys.limiter(name, "leases"), f"({now}", "+inf")
            pipe.zcard(self.keys.limiter(name, "parked"))
        elif kind == "window":
            pipe.zcount(state, f"({now - _length(d)}", "+inf")
        elif kind == "bucket":
            pipe.hmget(state, "bucket", "count")
        elif kind == "leaky":
            pipe.hmget(state, "level", "at")

    def _use(self, answers, d: dict, now: float) -> tuple[float, int]:
        kind = d.get("kind")
        if kind == "concurrent":
            return int(next(answers)), int(next(answers))
        if kind == "window":
            return int(next(answers)), 0
        if kind == "bucket":
            bucket, count = next(answers)
            length = _length(d)
            current = math.floor(now / length) * length if length else None
            return (int(count) if bucket is not None and float(bucket) == current else 0), 0
        if kind == "leaky":
            level, at = next(answers)
            if level is None:
                return 0, 0
            rate = (d.get("size") or 0) / (_length(d) or 1)
            return round(max(0.0, float(level) - max(0.0, now - float(at)) * rate), 3), 0
        return 0, 0


def _length(d: dict) -> float:
    from ..limiter import INTERVALS  # (the definitions' names: one table)
    interval = d.get("interval")
    if isinstance(interval, str):
        return float(INTERVALS.get(interval, 0))
    return float(interval or 0)


def _definition(raw: bytes | None) -> dict:
    try:
        d = json.loads(raw) if raw else {}
    except ValueError:
        d = {}
    return d if isinstance(d, dict) else {}
