"""The failure policy: what happens to a job that raised (Sidekiq 6.4 ``job_retry.rb``).

Owns the decision (retry later, dead, or drop), the fields it writes into the payload
(``queue``, ``error_message``, ``error_class``, ``failed_at``/``retried_at``, ``retry_count``,
``error_backtrace``), the delay formula with its jitter, the ``retry_in`` and
``retries_exhausted`` job hooks, and the compressed backtrace format. Everything here is a
pure function of its inputs (clock and random generator can be injected).

Does not own any Redis write: the caller stores ``Outcome.payload`` with ``Outcome.score`` in
the ``retry`` or ``dead`` set and drops its reservation in one Lua script, trims ``dead`` with
``dead_trim_bounds()`` in the same script, and runs the death handlers.

Ruby truthiness is the rule throughout: only ``false`` and ``nil`` are false, so ``retry: 0``
means "no retries, then dead" and ``backtrace: 0`` stores an empty backtrace. One departure: a
payload without a ``backtrace`` key keeps a bounded backtrace (DEFAULT_BACKTRACE_LINES), where
Sidekiq keeps none; ``backtrace: false`` (or null) still keeps none.
"""
from __future__ import annotations

import base64
import json
import logging
import random
import re
import time
import traceback
import zlib
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..payload import CRASHES, MAX_SECONDS, SUSPECT, dumps
from .tracebacks import job_frames

log = logging.getLogger(__name__)

#: Retries for ``retry: true`` (Sidekiq's ``max_retries``; about three weeks in total).
DEFAULT_MAX_RETRIES = 25
#: Dead jobs older than this many seconds are trimmed (Sidekiq: 180 days).
DEAD_TIMEOUT_IN_SECONDS = 180 * 24 * 60 * 60
#: Size cap of the dead set, in jobs (Sidekiq's ``dead_max_jobs``).
DEAD_MAX_JOBS = 10_000
#: ``error_message`` is cut to this many characters.
MAX_ERROR_MESSAGE = 10_000
#: A job whose payload has no ``backtrace`` key keeps this many lines of its error's
#: backtrace, innermost first (issue 20: the one on call needs it at 3 a.m.; Sidekiq keeps
#: none by default), each line cut to DEFAULT_BACKTRACE_CHARS: at most ~6 KB before
#: compression, well under 1 KB after for Python's short frames. ``backtrace: false`` keeps
#: none, ``true`` every line, N the first N (Sidekiq's meanings).
DEFAULT_BACKTRACE_LINES = 20
DEFAULT_BACKTRACE_CHARS = 300
#: Ruby's ``Base64.encode64`` ends a line after this many characters.
_BASE64_LINE = 60
_SURROGATE = re.compile("[\ud800-\udfff]")
_LEADING_INT = re.compile(r"\s*([+-]?\d+)")


@dataclass(frozen=True)
class Outcome:
    """``kind`` is "retry" (ZADD retry at ``score``), "dead" (ZADD dead at ``score``, then
    trim) or "drop" (store nothing). Death handlers run for every kind except "retry", as in
    Sidekiq. ``msg`` is a new dict; for a ``retry: false`` drop it is the unchanged job."""

    kind: str
    score: float
    msg: dict

    @property
    def payload(self) -> str:
        return dumps(self.msg)


class DeadTrim(NamedTuple):
    """Arguments of the two trims Sidekiq runs in the same MULTI as ``ZADD dead``:

    ``ZREMRANGEBYSCORE dead -inf <min_score_exclusive>`` removes every score <= the value
    (sent without "(", as Sidekiq does), so what survives has a score strictly above it.
    ``ZREMRANGEBYRANK dead 0 <rank_stop>`` with ``rank_stop = -dead_max_jobs`` removes the
    oldest; it keeps ``dead_max_jobs - 1`` jobs (Sidekiq's off-by-one, kept on purpose)."""

    min_score_exclusive: float
    rank_stop: int


def decide(msg: dict, exc: BaseException, queue: str, *, job_class: Any = None,
           max_retries: int = DEFAULT_MAX_RETRIES, now: float | None = None,
           rand: random.Random | None = None,
           backtrace_lines: list[str] | None = None) -> Outcome:
    """Decide the fate of ``msg`` (fetched from ``queue``) that raised ``exc``.

    ``msg`` is not modified. ``job_class`` may provide ``get_options()``,
    ``retry_in(count, exc)`` and ``retries_exhausted(msg, exc)``; ``backtrace_lines``
    (innermost first) replaces the lines taken from ``exc.__traceback__``."""
    now = time.time() if now is None else now
    msg = dict(msg)
    msg.pop(CRASHES, None)  # this run ended the job's streak of crashes (recovery.py)
    msg.pop(SUSPECT, None)
    retry = msg.get("retry")
    if retry is None:
        retry = _class_retry_option(job_class)
        if not _truthy(retry):
            return Outcome("drop", now, msg)
        if job_class is not None:
            msg["retry"] = retry  # job_retry.rb #local writes the class default into the job
    elif not _truthy(retry):
        return Outcome("drop", now, msg)

    count = _write_failure_fields(msg, exc, queue, now, backtrace_lines)
    limit = retry if isinstance(retry, int) and not isinstance(retry, bool) else max_retries
    if count < limit:
        return Outcome("retry", now + delay_for(count, exc, job_class, rand, msg), msg)
    _call_retries_exhausted(job_class, msg, exc)
    return Outcome("drop" if msg.get("dead") is False else "dead", now, msg)


def kill(msg: dict, exc: BaseException, queue: str, *, job_class: Any = None,
         now: float | None = None) -> Outcome:
    """A job that must not run again (a poison pill that keeps killing its worker): the
    failure fields as ``decide`` writes them, then straight to ``dead`` whatever retries are
    left (``dead: false`` still means drop). Sidekiq Pro kills poison pills the same way."""
    now = time.time() if now is None else now
    msg = dict(msg)
    msg.pop(CRASHES, None)  # retried from dead, it starts afresh
    msg.pop(SUSPECT, None)
    _write_failure_fields(msg, exc, queue, now, [])
    _call_retries_exhausted(job_class, msg, exc)
    return Outcome("drop" if msg.get("dead") is False else "dead", now, msg)


def rejected(msg: dict, exc: BaseException, queue: str, now: float | None = None) -> Outcome:
    """An unusable job (a JSON object without ``class``, ``args`` of another type...) for the
    dead set: the failure fields written into it, so whoever looks at it sees why."""
    now = time.time() if now is None else now
    msg = dict(msg)
    _write_failure_fields(msg, exc, queue, now, [])
    return Outcome("dead", now, msg)


def buried(msg: dict, reason: str, queue: str, now: float | None = None) -> Outcome:
    """A job that buried itself (ops.bury): the failure fields, ``error_class`` ``Buried`` and
    the reason, straight to dead whatever retries it has (death handlers are not run: nothing
    failed)."""
    return failed_for_good(msg, _Buried(reason), queue, now)


def failed_for_good(msg: dict, exc: BaseException, queue: str,
                    now: float | None = None) -> Outcome:
    """A job that must not be retried, on purpose (a bury, a business failure: JobFailed):
    the failure fields, straight to dead whatever retries it has, without death handlers
    (nothing broke)."""
    now = time.time() if now is None else now
    msg = dict(msg)
    msg.pop(CRASHES, None)
    msg.pop(SUSPECT, None)
    _write_failure_fields(msg, exc, queue, now, [])
    return Outcome("dead", now, msg)


class _Buried(Exception):
    """The error a buried job is recorded with (error_class ``Buried``)."""

    error_class = "Buried"


def describe(outcome: Outcome, max_retries: int = DEFAULT_MAX_RETRIES) -> str:
    """What happens next, for the log: ``retry 3/25 at 14:07:12Z``, ``dead``, ``dropped
    (retry: false)``."""
    msg = outcome.msg
    if outcome.kind == "retry":
        limit = msg.get("retry")
        if not isinstance(limit, int) or isinstance(limit, bool):
            limit = max_retries
        attempt = (_ruby_to_i(msg.get("retry_count")) or 0) + 1
        return f"retry {attempt}/{limit} at {_when(outcome.score)}"
    if outcome.kind == "drop":
        return "dropped (dead: false)" if msg.get("dead") is False else "dropped (retry: false)"
    return "dead"


def _when(epoch: float) -> str:
    """``14:07:12Z`` today (UTC, like the log's timestamps), else ``2026-11-27 09:12:00Z``."""
    day = time.strftime("%Y-%m-%d", time.gmtime())
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch))
    return (text[11:] if text.startswith(day) else text) + "Z"


def delay_for(count: int, exc: BaseException, job_class: Any = None,
              rand: random.Random | None = None, msg: dict | None = None) -> int:
    """Seconds until retry number ``count`` (0 after the first failure): ``count**4 + 15``
    or the job's ``retry_in`` (used only when it gives an integer > 0, like Ruby's
    ``.to_i``), plus ``rand(10) * (count + 1)`` jitter in both cases."""
    jitter = (rand if rand is not None else random).randrange(10) * (count + 1)
    custom = _custom_retry_in(job_class, count, exc, msg)
    if custom is not None and custom > 0:
        return _at_most(custom + jitter)
    if not count < _BIG_COUNT:  # (count**4 of a payload's retry_count of 1e308 overflows)
        return MAX_SECONDS
    return _at_most(count**4 + 15 + jitter)


#: A retry_count from which count**4 alone is past MAX_SECONDS.
_BIG_COUNT = int(MAX_SECONDS ** 0.25) + 1


def _at_most(delay: Any) -> int:
    """A delay a float epoch holds: at most MAX_SECONDS (a payload's retry_count of 10**400
    gave a delay that time.time() + delay could not add)."""
    return int(delay) if delay < MAX_SECONDS else MAX_SECONDS


def dead_trim_bounds(now: float, dead_timeout_in_seconds: float = DEAD_TIMEOUT_IN_SECONDS,
                     dead_max_jobs: int = DEAD_MAX_JOBS) -> DeadTrim:
    """The trim arguments for a job added to ``dead`` at ``now`` (see ``DeadTrim``)."""
    return DeadTrim(now - dead_timeout_in_seconds, -dead_max_jobs)


def compress_backtrace(lines: list[str]) -> str:
    """``Base64.encode64(Zlib::Deflate.deflate(JSON.generate(lines)))``, byte for byte:
    zlib with its header at the default level, base64 with a newline after every 60
    characters and after the last line."""
    text = base64.b64encode(zlib.compress(dumps(list(lines)).encode("utf-8"))).decode("ascii")
    return "".join(text[i:i + _BASE64_LINE] + "\n" for i in range(0, len(text), _BASE64_LINE))


def decompress_backtrace(blob: str | list) -> list[str]:
    """The lines of an ``error_backtrace``. Sidekiq before 6.0 stored a plain list; that is
    returned as it is. A blob of JSON ``null`` (a Ruby exception without backtrace) is [].
    A corrupt blob raises ValueError."""
    if isinstance(blob, list):
        return blob
    try:
        raw = zlib.decompress(base64.b64decode(blob))
    except zlib.error as e:
        raise ValueError(f"error_backtrace is not zlib data: {e}") from None
    lines = json.loads(raw)
    return lines if isinstance(lines, list) else []


def error_message(exc: BaseException) -> str:
    """``str(exc)`` cut to 10,000 characters, the class name when empty, lone surrogates
    replaced by U+FFFD (Ruby's ``scrub!``) so the payload stays valid UTF-8."""
    try:
        text = str(exc)
    except Exception:
        return "!!! ERROR MESSAGE THREW AN ERROR !!!"
    text = (text or type(exc).__qualname__)[:MAX_ERROR_MESSAGE]
    if _SURROGATE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def error_class(exc: BaseException) -> str:
    """The class name, unless the exception carries an ``error_class`` string (the master
    uses that to report a job whose worker process died)."""
    override = getattr(exc, "error_class", None)
    if isinstance(override, str) and override:
        return override
    return type(exc).__qualname__


def ruby_backtrace(exc: BaseException) -> list[str]:
    """The traceback innermost frame first, each line as Ruby prints it:
    ``path:lineno:in `function'``."""
    frames = traceback.extract_tb(exc.__traceback__)
    return [f"{f.filename}:{f.lineno}:in `{f.name}'" for f in reversed(frames)]


def _write_failure_fields(msg: dict, exc: BaseException, queue: str, now: float,
                          backtrace_lines: list[str] | None) -> Any:
    """Sidekiq's assignments, in its order (new keys are appended, existing keys keep their
    place); returns the new retry_count."""
    retry_queue = msg.get("retry_queue")
    msg["queue"] = retry_queue if _truthy(retry_queue) else queue
    msg["error_message"] = error_message(exc)
    msg["error_class"] = error_class(exc)
    previous = msg.get("retry_count")
    if _truthy(previous):
        msg["retried_at"] = now
        msg["retry_count"] = _next_count(previous)
    else:
        msg["failed_at"] = now
        msg["retry_count"] = 0
    if "backtrace" not in msg:
        _default_backtrace(msg, exc, backtrace_lines)
        return msg["retry_count"]
    wanted = msg.get("backtrace")
    if _truthy(wanted):
        lines = list(backtrace_lines) if backtrace_lines is not None else ruby_backtrace(exc)
        if wanted is not True:
            n = _ruby_to_i(wanted)
            lines = lines if n is None else lines[:n]
        msg["error_backtrace"] = compress_backtrace(lines)
    return msg["retry_count"]


def _default_backtrace(msg: dict, exc: BaseException, backtrace_lines: list[str] | None) -> None:
    """A job that says nothing about backtraces: the first DEFAULT_BACKTRACE_LINES lines of
    the job's own frames (as the log shows them: without queued's frames around the job and
    the alarm handler's), each cut to DEFAULT_BACKTRACE_CHARS; nothing when there are none (an
    exception never raised, a job failed by the master), so such a member stays Sidekiq's to
    the byte."""
    if backtrace_lines is not None:
        lines = list(backtrace_lines)
    else:
        lines = [f"{f.filename}:{f.lineno}:in `{f.name}'"
                 for f in reversed(job_frames(exc.__traceback__))]
    if lines:
        msg["error_backtrace"] = compress_backtrace(
            [line[:DEFAULT_BACKTRACE_CHARS] for line in lines[:DEFAULT_BACKTRACE_LINES]])


def _class_retry_option(job_class: Any) -> Any:
    get_options = getattr(job_class, "get_options", None)
    if not callable(get_options):
        return True
    return get_options().get("retry", True)


def _custom_retry_in(job_class: Any, count: Any, exc: BaseException,
                     msg: dict | None) -> int | None:
    hook = getattr(job_class, "retry_in", None)
    if not callable(hook):
        return None
    try:
        return _ruby_to_i(hook(count, exc))
    except Exception:
        log.exception("retry_in of %s failed; using the default delay%s",
                      getattr(job_class, "__name__", job_class), _job_context(msg))
        return None


def _call_retries_exhausted(job_class: Any, msg: dict, exc: BaseException) -> None:
    hook = getattr(job_class, "retries_exhausted", None)
    if not callable(hook):
        return
    try:
        hook(msg, exc)
    except Exception:
        log.exception("retries_exhausted of %s failed%s",
                      getattr(job_class, "__name__", job_class), _job_context(msg))


def _job_context(msg: dict | None) -> str:
    if not msg:
        return ""
    return f" (jid={msg.get('jid')} class={msg.get('class')} queue={msg.get('queue')})"


def _truthy(value: Any) -> bool:
    """Ruby truthiness: everything but false and nil, including 0 and ""."""
    return value is not None and value is not False


def _next_count(previous: Any) -> Any:
    # Ruby would raise on a non-numeric retry_count and lose the job; coerce instead.
    if isinstance(previous, (int, float)) and not isinstance(previous, bool):
        return previous + 1
    return (_ruby_to_i(previous) or 0) + 1


def _ruby_to_i(value: Any) -> int | None:
    """Ruby's ``to_i`` for numbers and strings ("12abc" -> 12, "x" -> 0); None for values
    Ruby cannot convert (nil, booleans, lists, NaN)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        try:
            return int(value)
        except (ValueError, OverflowError):
            return None
    if isinstance(value, str):
        m = _LEADING_INT.match(value)
        return int(m.group(1)) if m else 0
    return None
