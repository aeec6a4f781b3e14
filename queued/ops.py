"""Job operations inside ``perform``, with Beanstalkd's (and seed 003's Grape's) meanings:

- ``release(delay=0)``: end this run without a failure and run the job again after ``delay``
  seconds (at once: back in its queue). Not counted in ``stat:failed``, no ``retry_count``
  change; the payload counts releases (``release_count``).
- ``touch()``: renew the lease that keeps this job from being recovered by another master, for
  a job that may outlive ``lease_timeout`` while its master is frozen or cut off. Leases are per
  master (renewed by its heartbeat), so a touch renews the master's: a job that touches proves
  the host alive. False when the lease had already lapsed (the job may be running elsewhere).
- ``bury(reason)``: send the job to ``dead`` now, on purpose (``error_class`` ``Buried``); the
  payload counts buries (``bury_count``). An operator kicks it back with
  ``queuedctl retry dead JID`` (which counts ``kick_count``).

- ``say(text)``: a time-stamped line in this job's message log in its task (seed 000's
  messages: "registered", "price rejected: below cost"); also logged at INFO, so a job outside
  a task can call it as well.

``Job.release``/``touch``/``bury``/``say`` call these; plain function jobs (``@queued.job``) call them
as ``queued.release(...)``. Release and bury unwind the job with a BaseException, as
``JobTimeout`` does, so an ``except Exception`` in job code cannot swallow them.
"""
from __future__ import annotations

import logging
from typing import Callable, NoReturn

#: Payload keys the worker counts in (Beanstalkd's stats-job): releases, buries; kicks are
#: counted by the operator's side.
RELEASES, BURIES = "release_count", "bury_count"


class Release(BaseException):
    """Unwinds a job that released itself (``release(delay)``)."""

    def __init__(self, delay: float = 0.0):
        super().__init__(f"released for {delay:g}s")
        self.delay = delay


class Bury(BaseException):
    """Unwinds a job that buried itself (``bury(reason)``)."""

    def __init__(self, reason: str = ""):
        super().__init__(reason or "buried")
        self.reason = reason or "buried"


log = logging.getLogger("queued.job")

# Set by the worker: what touch() and say() do there (None outside a worker).
_toucher: Callable[[], bool] | None = None
_sayer: Callable[[str], None] | None = None


def set_toucher(fn: Callable[[], bool] | None) -> None:
    global _toucher
    _toucher = fn


def set_sayer(fn: Callable[[str], None] | None) -> None:
    global _sayer
    _sayer = fn


def release(delay: float = 0.0) -> NoReturn:
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or delay < 0 \
            or delay != delay:
        raise ValueError(f"release takes a delay in seconds >= 0, not {delay!r}")
    raise Release(float(delay))


def bury(reason: str = "") -> NoReturn:
    raise Bury(str(reason))


def touch() -> bool:
    if _toucher is None:
        raise RuntimeError("touch() is for a job running in a queued worker")
    return _toucher()


def say(text: str) -> None:
    text = str(text)
    log.info("say: %s", text)
    if _sayer is not None:
        _sayer(text)
