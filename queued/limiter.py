"""Rate limiters shared by every process on the Redis (Sidekiq Enterprise's ``Sidekiq::Limiter``)::

    ERP = queued.Limiter.concurrent("erp", 50, wait_timeout=5, lock_timeout=30)
    STRIPE = queued.Limiter.bucket("stripe", 30, "second")
    MAIL = queued.Limiter.window("mail", 100, 60)
    API = queued.Limiter.leaky("api", 60, 60)

    class Sync(queued.Job):
        def perform(self, account_id):
            with ERP:                     # one unit; `async with ERP:` in an async def job
                ...

Every limit is global: the count lives in Redis, so 50 means 50 across every process and host
(Celery's ``rate_limit`` is per worker, its #5732). A limiter object is a definition: make it
once (a module global) and use it from any thread or coroutine; what one ``with`` holds is kept
in the running thread's or task's own context (``contextvars``).

- ``concurrent``: at most SIZE held at once. A unit is a lease that ends ``lock_timeout`` after
  it was taken (Redis's clock), so a holder that crashed gives it back by itself. A caller that
  finds none free waits on the limiter's wake list (BLPOP, no polling) until a release pushes
  to it or the earliest lease ends, up to ``wait_timeout``.
- ``bucket``: SIZE per calendar second, minute, hour or day (UTC).
- ``window``: SIZE in any rolling interval of SECONDS.
- ``leaky``: a bucket of SIZE draining SIZE per SECONDS (a burst, then a steady rate).
  These three know when room comes: a caller sleeps until then if that is within
  ``wait_timeout``.

A caller that gets no unit within ``wait_timeout`` gets ``queued.OverLimit``. Raised out of a
job's ``perform`` it is no failure: the worker reschedules the job (server/guards.py, with
limit_park.lua: woken when the limiter has room, at the latest after Sidekiq Enterprise's
linear backoff), ``reschedule`` times at most, counting them in the payload's ``overrated``;
past that it takes the normal retry path.

Each operation is one Lua script (queued/lua/limit_*.lua, all keys passed in KEYS), and every
take also counts what happened in the limiter's hash (held, waited, overlimit...), which
``queuedctl limits`` and the dashboard show. Tests inject a clock (``limiter.clock``); in
production the time is Redis's.
"""
from __future__ import annotations

import contextvars
import json
import os
import random
import re
import time
from typing import Any, Callable

from . import client as _client
from .connection import Script
from .errors import OverLimit
from .payload import MAX_SECONDS
from .limitasync import async_redis as _async_redis, run_async as _run_async

_LUA = os.path.join(os.path.dirname(__file__), "lua")
with open(os.path.join(_LUA, "limit_lib.lua"), "rb") as _f:
    _LIB = _f.read() + b"\n"

CONCURRENT_TAKE = Script(_LUA, "limit_concurrent_take", prelude=_LIB)
CONCURRENT_GIVE = Script(_LUA, "limit_concurrent_give", prelude=_LIB)
BUCKET_TAKE = Script(_LUA, "limit_bucket", prelude=_LIB)
WINDOW_TAKE = Script(_LUA, "limit_window", prelude=_LIB)
LEAKY_TAKE = Script(_LUA, "limit_leaky", prelude=_LIB)
PARK = Script(_LUA, "limit_park", prelude=_LIB)

#: Calendar buckets, in seconds.
INTERVALS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
#: Defaults, as Sidekiq Enterprise's: seconds a caller may wait for a unit, seconds a
#: concurrent unit is held at most, reschedules of a job after OverLimit.
WAIT_TIMEOUT, LOCK_TIMEOUT, RESCHEDULE = 5.0, 30.0, 20
#: The longest one BLPOP waits before the caller tries again (a client's socket timeout must
#: not cut a long wait short); a release wakes it at once whatever this is.
BLOCK_MAX = 5.0
#: Jitter (seconds) of a parked job woken by a concurrent release.
WAKE_JITTER = 0.05
_NAME = re.compile(r"[^\s{}]{1,200}")
#: The most reschedules a limiter may give a job (Sidekiq Enterprise's default is 20): the
#: backoff of the last one, 300 * reschedule seconds, stays within payload.MAX_SECONDS.
MAX_RESCHEDULE = 10_000


def backoff(overrated: int, rand: random.Random | None = None) -> float:
    """Sidekiq Enterprise's linear backoff for the ``overrated``-th reschedule: 300 *
    overrated + rand(300) + 1 seconds (rand(300): a whole number 0..299)."""
    return 300 * overrated + (rand or random).randrange(300) + 1


class Limiter:
    """A limiter's definition; make one with ``concurrent``, ``bucket``, ``window`` or
    ``leaky``. ``client``: the queued.Client whose Redis and namespace to use (None: the
    default client at each use, which in a worker is the daemon's)."""

    kind = ""
    #: The time in seconds, or None for Redis's clock (tests give one).
    clock: Callable[[], float] | None = None

    def __init__(self, name: str, size: int, *, wait_timeout: float = WAIT_TIMEOUT,
                 reschedule: int = RESCHEDULE, client: Any = None):
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"a limiter's name is 1 to 200 characters without spaces or "
                             f"braces, not {name!r}")
        _whole(size, "size", 1)
        _seconds(wait_timeout, "wait_timeout", 0)
        _whole(reschedule, "reschedule", 0, MAX_RESCHEDULE)
        self.name = name
        self.size = size
        self.wait_timeout = float(wait_timeout)
        self.reschedule = reschedule
        self.client = client
        self._def = ""

    def __repr__(self) -> str:
        return f"<queued.Limiter.{self.kind} {self.name!r} size={self.size}>"

    # --- the four kinds ---------------------------------------------------------------------
    @staticmethod
    def concurrent(name: str, size: int, *, wait_timeout: float = WAIT_TIMEOUT,
                   lock_timeout: float = LOCK_TIMEOUT, reschedule: int = RESCHEDULE,
                   client: Any = None) -> "Concurrent":
        return Concurrent(name, size, wait_timeout=wait_timeout, lock_timeout=lock_timeout,
                          reschedule=reschedule, client=client)

    @staticmethod
    def bucket(name: str, size: int, interval: str, *, wait_timeout: float = WAIT_TIMEOUT,
               reschedule: int = RESCHEDULE, client: Any = None) -> "Rate":
        if interval not in INTERVALS:
            raise ValueError(f"a bucket's interval is one of {', '.join(INTERVALS)}, "
                             f"not {interval!r}")
        return Rate("bucket", BUCKET_TAKE, name, size, INTERVALS[interval], interval,
                    wait_timeout=wait_timeout, reschedule=reschedule, client=client)

    @staticmethod
    def window(name: str, size: int, seconds: float, *, wait_timeout: float = WAIT_TIMEOUT,
               reschedule: int = RESCHEDULE, client: Any = None) -> "Rate":
        _seconds(seconds, "seconds", 0, above=True)
        return Rate("window", WINDOW_TAKE, name, size, float(seconds), seconds,
                    wait_timeout=wait_timeout, reschedule=reschedule, client=client)

    @staticmethod
    def leaky(name: str, size: int, seconds: float, *, wait_timeout: float = WAIT_TIMEOUT,
              reschedule: int = RESCHEDULE, client: Any = None) -> "Rate":
        _seconds(seconds, "seconds", 0, above=True)
        return Rate("leaky", LEAKY_TAKE, name, size, float(seconds), seconds,
                    wait_timeout=wait_timeout, reschedule=reschedule, client=client)

    # --- using one --------------------------------------------------------------------------
    def __enter__(self) -> "Limiter":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    async def __aenter__(self) -> "Limiter":
        await self.acquire_async()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.release_async()

    def acquire(self) -> None:
        """Take one unit, waiting up to ``wait_timeout``; OverLimit if none came."""
        raise NotImplementedError

    async def acquire_async(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        """Give back what the innermost ``with`` of this thread or task took (a concurrent
        unit; the other kinds keep nothing)."""

    async def release_async(self) -> None:
        pass

    # --- shared plumbing --------------------------------------------------------------------
    def _client(self) -> Any:
        return self.client if self.client is not None else _client.default_client()

    def _now(self) -> str:
        return "" if self.clock is None else repr(float(self.clock()))

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def definition(self) -> dict:
        """What the limiter's hash keeps as ``def`` (the dashboard shows it)."""
        return {"kind": self.kind, "size": self.size, "wait_timeout": self.wait_timeout,
                "reschedule": self.reschedule}

    def _definition(self) -> str:
        if not self._def:
            self._def = json.dumps(self.definition(), separators=(",", ":"))
        return self._def

    def over(self, wait_ms: int) -> OverLimit:
        wait = wait_ms / 1000 if wait_ms > 0 and self.kind != "concurrent" else None
        return OverLimit(self, wait)

    # --- the worker's side: an OverLimit raised out of a job (server/guards.py) -------------
    def park_call(self, keys: Any, payload: str, overrated: int, wait: float | None,
                  rand: random.Random | None = None, cap: float | None = None
                  ) -> tuple[list, list]:
        """KEYS and ARGV of limit_park.lua for a job rescheduled after this limiter's
        OverLimit: ``payload`` as it is in the schedule, its ``overrated`` count (this one
        included), ``cap`` the seconds from now it is scheduled at already (None: its
        ``backoff``)."""
        rand = rand or random
        spacing = self.spacing()
        if cap is None:
            cap = backoff(overrated, rand)
        ks = [keys.limiter(self.name), keys.limiter(self.name, "parked"),
              keys.limiter(self.name, "leases"), keys.counter("overlimit"), keys.schedule]
        jitter = WAKE_JITTER * rand.random() if spacing is None else spacing * rand.random()
        args = [self.kind, self._now(), repr(float(cap)), repr(-1.0 if wait is None else wait),
                repr(spacing or 0.0), repr(jitter), payload, self.size,
                int((backoff(self.reschedule + 1) + 600) * 1000)]
        return ks, args

    def spacing(self) -> float | None:
        """Seconds between two parked jobs' wakes (a rate limiter's rate); None: concurrent."""
        return None


class Concurrent(Limiter):
    """At most ``size`` units held at once (see the module header)."""

    kind = "concurrent"

    def __init__(self, name: str, size: int, *, lock_timeout: float = LOCK_TIMEOUT,
                 **options: Any):
        super().__init__(name, size, **options)
        _seconds(lock_timeout, "lock_timeout", 0, above=True)
        self.lock_timeout = float(lock_timeout)
        #: The tokens this thread's or task's open ``with`` blocks hold, innermost last.
        self._held: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
            f"queued_limiter_{name}", default=())

    def definition(self) -> dict:
        return {**super().definition(), "lock_timeout": self.lock_timeout}

    def _keys(self, keys: Any) -> list[str]:
        return [keys.limiter(self.name), keys.limiter(self.name, "leases"),
                keys.limiter(self.name, "wake"), keys.limiter(self.name, "parked"),
                keys.schedule]

    def _take_call(self, keys: Any, token: str, waited: float | None,
                   left: float) -> tuple[list, list]:
        return ([*self._keys(keys), keys.limiters],
                [self.size, token, int(self.lock_timeout * 1000), self._now(),
                 "" if waited is None else int(waited * 1000), int(max(0.0, left) * 1000),
                 self._definition(), self.name, repr(WAKE_JITTER * random.random())])

    def _give_call(self, keys: Any, token: str) -> tuple[list, list]:
        return (self._keys(keys), [token, self.size, self._now(),
                                   repr(WAKE_JITTER * random.random())])

    def acquire(self) -> None:
        c = self._client()
        r, keys = c.redis, c.keys
        token = os.urandom(8).hex()
        start = time.monotonic()
        waited = None
        while True:
            left = self.wait_timeout - (time.monotonic() - start)
            granted, wait_ms = CONCURRENT_TAKE(r, *self._take_call(keys, token, waited, left))
            if granted:
                self._held.set(self._held.get() + (token,))
                return
            if left <= 0:
                raise self.over(wait_ms)
            # Until a release pushes a token, the earliest lease ends, or our time is up
            r.blpop([keys.limiter(self.name, "wake")], _block_for(left, wait_ms))
            waited = time.monotonic() - start

    async def acquire_async(self) -> None:
        c = self._client()
        r, keys = _async_redis(c), c.keys
        token = os.urandom(8).hex()
        start = time.monotonic()
        waited = None
        while True:
            left = self.wait_timeout - (time.monotonic() - start)
            granted, wait_ms = await _run_async(
                CONCURRENT_TAKE, r, *self._take_call(keys, token, waited, left))
            if granted:
                self._held.set(self._held.get() + (token,))
                return
            if left <= 0:
                raise self.over(wait_ms)
            await r.blpop([keys.limiter(self.name, "wake")], _block_for(left, wait_ms))
            waited = time.monotonic() - start

    def _pop(self) -> str | None:
        held = self._held.get()
        if not held:
            return None
        self._held.set(held[:-1])
        return held[-1]

    def release(self) -> None:
        token = self._pop()
        if token is not None:
            c = self._client()
            CONCURRENT_GIVE(c.redis, *self._give_call(c.keys, token))

    async def release_async(self) -> None:
        token = self._pop()
        if token is not None:
            c = self._client()
            await _run_async(CONCURRENT_GIVE, _async_redis(c), *self._give_call(c.keys, token))

    def held(self) -> int:
        """Units this thread or task holds now (its open ``with`` blocks)."""
        return len(self._held.get())


class Rate(Limiter):
    """A bucket, window or leaky limiter: ``size`` units per ``length`` seconds, in the
    kind's way (see the module header)."""

    def __init__(self, kind: str, script: Script, name: str, size: int, length: float,
                 interval: Any, **options: Any):
        super().__init__(name, size, **options)
        self.kind = kind
        self.script = script
        self.length = float(length)
        self.interval = interval

    def definition(self) -> dict:
        return {**super().definition(), "interval": self.interval}

    def spacing(self) -> float:
        return self.length / self.size

    def _take_call(self, keys: Any, waited: float | None, left: float) -> tuple[list, list]:
        args = [self.size, repr(self.length), self._now(),
                "" if waited is None else int(waited * 1000), int(max(0.0, left) * 1000),
                self._definition(), self.name]
        if self.kind == "window":
            args.append(os.urandom(8).hex())
        return [keys.limiter(self.name), keys.limiter(self.name, "state"), keys.limiters], args

    def acquire(self) -> None:
        c = self._client()
        start = time.monotonic()
        waited = None
        while True:
            left = self.wait_timeout - (time.monotonic() - start)
            granted, wait_ms = self.script(c.redis, *self._take_call(c.keys, waited, left))
            if granted:
                return
            if wait_ms / 1000 > left:
                raise self.over(wait_ms)
            self._sleep(wait_ms / 1000)  # exactly until room comes: not a poll
            waited = time.monotonic() - start

    async def acquire_async(self) -> None:
        c = self._client()
        r = _async_redis(c)
        start = time.monotonic()
        waited = None
        while True:
            left = self.wait_timeout - (time.monotonic() - start)
            granted, wait_ms = await _run_async(self.script, r,
                                                *self._take_call(c.keys, waited, left))
            if granted:
                return
            if wait_ms / 1000 > left:
                raise self.over(wait_ms)
            import asyncio  # (only async callers pay for it)
            await asyncio.sleep(wait_ms / 1000)
            waited = time.monotonic() - start


def _block_for(left: float, wait_ms: int) -> float:
    """A BLPOP's timeout: until the caller's time is up or the earliest lease ends (a crashed
    holder's unit comes back then, with no release to push a token), at most BLOCK_MAX; never
    0, which would block for ever."""
    until = min(left, BLOCK_MAX, wait_ms / 1000 if wait_ms > 0 else BLOCK_MAX)
    return max(0.001, until)


def _whole(value: Any, what: str, least: int, most: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least \
            or (most is not None and value > most):
        raise ValueError(f"a limiter's {what} is a whole number >= {least}"
                         f"{'' if most is None else f' and at most {most}'}, not {value!r}")


def _seconds(value: Any, what: str, least: float, above: bool = False) -> None:
    """A span in seconds, at most payload.MAX_SECONDS (a lock_timeout of 1e300 was taken,
    then every take failed in Redis: its lease's expiry out of range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < least \
            or (above and value == least) or value != value or value > MAX_SECONDS:
        raise ValueError(f"a limiter's {what} is a number of seconds "
                         f"{'>' if above else '>='} {least:g} and at most {MAX_SECONDS} "
                         f"(ten years), not {value!r}")
