"""Sidekiq's job payload: parsing, dumping and timestamps (SIDEKIQ_FORMAT.md section 3).

A payload is a JSON object. queued keeps every key it does not know, keeps key order (Python
dicts do, like Ruby hashes), keeps ``1`` and ``1.0`` distinct and integers of any size, and
dumps the way Ruby's ``JSON.generate`` does: no spaces, non-ASCII raw, ``/`` unescaped.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from typing import Any

from .errors import PayloadError

#: The payload key that counts how often a job killed its worker in a row (recovery.py): set
#: by the master when it puts such a job back, gone once a run ends (success or failure).
CRASHES = "queued_crashes"
#: The payload key that marks a job as a suspect (recovery.py): it was one of several jobs
#: running in a worker process that crashed, so it is not known to be the culprit; it runs
#: next alone, where a crash is its own. Gone, like CRASHES, once a run ends.
SUSPECT = "queued_suspect"
#: Integers above this are epoch milliseconds (Sidekiq 8), below it epoch seconds.
_MS_THRESHOLD = 10**11
#: The longest span of seconds queued takes from a payload or an option (``unique_for``,
#: ``timeout``, ``expires_in``, a retry's delay, a limiter's times): ten years. Everything that
#: holds a span must hold this one: Redis's PX (milliseconds from now, a signed 64-bit count),
#: setitimer (Python's nanoseconds in 64 bits: about 292 years), a float epoch. A payload from
#: outside may carry any number (JSON integers have no size limit: float() of 10**400
#: overflows; a unique_for of 1e20 made Redis refuse the lock's expiry): read through
#: ``seconds_of``, a bigger one means "as long as can be", and the options refuse it.
MAX_SECONDS = 10 * 365 * 24 * 3600

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ascii_encoder = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)

# Ruby's Float#to_s (what JSON.generate writes) and Python's repr pick the same shortest
# digits but print two cases differently: Ruby always writes a fraction in the mantissa
# ("1.0e+20", Python "1e+20"), and Ruby uses the exponent form for integer-valued floats from
# 1e15 (Python from 1e16: "1000000000000000.0", Ruby "1.0e+15"; 1234567890123456.5 is fixed
# in both). Both forms are valid JSON that parse to the same float; dumps() rewrites Python's
# so a re-encoded payload is byte-compatible with Sidekiq's (tests/interop compare with Ruby).
# The C encoder has no float hook, so the text is patched after encoding, in three steps from
# cheap to thorough: substring checks rule out almost every payload (a regex search would cost
# more than the encoding), a walk over the values (cheap however long the strings are) finds
# whether a float to rewrite is really there, and only then a tokenizer skips the strings
# (which may hold the same characters) and rewrites the number tokens after "[", "," or ":".
_RUBY_FLOAT_TOKENS = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"|(?<![^\[,:])(-?\d+e[+-]\d+|-?\d{16}\.0(?![\d.e]))')


def derived_jid(raw: bytes) -> str:
    """The jid of a job pushed without one: 24 hex characters made from its bytes, so the
    worker that runs it and the master that recovers it (crash, timeout) agree on it."""
    return hashlib.sha1(raw).hexdigest()[:24]


def jid_of(raw: bytes) -> str | None:
    """The jid a worker runs this payload under: its own, or derived_jid for a JSON object
    without one; None if it is not a job at all."""
    msg = json_object(raw)
    if msg is None:
        return None
    jid = msg.get("jid", None)
    if jid is None and "jid" not in msg:
        return derived_jid(raw)
    return jid if isinstance(jid, str) else None


def new_jid() -> str:
    """24 lowercase hex characters, like ``SecureRandom.hex(12)``."""
    return os.urandom(12).hex()


def now() -> float:
    return time.time()


def to_epoch(value: Any) -> float | None:
    """A payload timestamp as float seconds: float seconds (Sidekiq 6/7) or integer
    milliseconds (Sidekiq 8) are both accepted; None for anything else (an integer past what
    a float holds included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        if isinstance(value, int) and value > _MS_THRESHOLD:
            return value / 1000.0
        return float(value)
    except OverflowError:
        return None


def seconds_of(value: Any) -> float | None:
    """A payload's span of seconds made usable: None unless it is a number > 0 (not a bool,
    not NaN), and at most MAX_SECONDS (a bigger one, however big, reads as MAX_SECONDS)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value) if value < MAX_SECONDS else float(MAX_SECONDS)


def check_seconds(key: str, value: Any) -> None:
    """A producer's own span (an option, a push's key): ValueError naming ``key`` unless a
    number > 0 and at most MAX_SECONDS (None means "not set" and passes)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f'job "{key}" must be a number of seconds > 0, not {value!r}')
    if value > MAX_SECONDS:
        raise ValueError(f'job "{key}" must be at most {MAX_SECONDS} seconds (ten years), '
                         f'not {value!r}')


def _not_json(name: str):
    # Python's json takes NaN and Infinity; JSON (and Ruby) do not, and dumps() could not
    # write them back.
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    # Python reads 1e400 as inf, which dumps() cannot write back: a job holding one crashed
    # its worker on the failure path, then crashed the master as a poison pill (found by
    # tests/faults). Ruby's JSON.generate refuses Infinity too.
    value = float(text)
    if value in (_INF, -_INF):
        raise ValueError(f"number {text} is out of range")
    return value


_INF = float("inf")
#: (one decoder for every payload: json.loads with options makes a new one per call, which
#: was a tenth of the parse)
_decoder = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)
#: The decoder's C scanner, called directly for a payload that is one JSON value and nothing
#: else: decode() wraps it in two Python calls and two whitespace matches, a quarter of a
#: small payload's parse (issue 18). Anything else goes through decode(), errors included.
_scan = _decoder.scan_once


def loads(raw: str | bytes) -> dict:
    """Parse a queue element into a job dict, or raise PayloadError saying why not."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PayloadError(
                f"payload is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        msg, end = _scan(raw, 0)
    except (StopIteration, ValueError, RecursionError):  # (said below)
        end = -1
    if end != len(raw):
        try:
            msg = _decoder.decode(raw)
        except ValueError as e:
            raise PayloadError(f"payload is not valid JSON: {e}") from None
        except RecursionError:
            # (arrays or objects nested thousands deep: it crashed the worker, which put it
            # back at the head of its queue, where it blocked every job behind it)
            raise PayloadError("payload nests deeper than the JSON parser reads") from None
    if not isinstance(msg, dict):
        raise PayloadError(f"payload is JSON {type(msg).__name__}, not an object")
    return msg


def json_object(raw: str | bytes) -> dict | None:
    """What an operator's tool reads of an element Redis holds: the JSON object it is, or None
    (not JSON, nested too deep for the parser, or JSON of another kind). Plain JSON, unlike
    ``loads``: an element the daemon refused is still shown as far as it reads."""
    try:
        msg = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return msg if isinstance(msg, dict) else None


def validate(msg: dict) -> None:
    """Check the fields a server needs; raise PayloadError naming the first problem."""
    cls = msg.get("class")
    if not isinstance(cls, str) or not cls:
        raise PayloadError('payload has no "class" string')
    if "args" not in msg:
        raise PayloadError('payload has no "args"')
    if not isinstance(msg["args"], list):
        raise PayloadError(f'payload "args" is {type(msg["args"]).__name__}, not a list')
    # A missing jid is allowed (Sidekiq's server runs such a job; the worker gives it one:
    # derived_jid), but a jid that is there must be a string.
    if "jid" in msg and (not isinstance(msg["jid"], str) or not msg["jid"]):
        raise PayloadError('payload "jid" is not a non-empty string')


def dumps(msg: Any) -> str:
    """JSON text the way Sidekiq writes it. Falls back to ASCII escapes for strings that
    cannot be UTF-8 encoded (lone surrogates from ``\\ud800`` in PHP input), so a payload is
    never lost to an encoding error."""
    text = _encoder.encode(msg)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _ascii_encoder.encode(msg)
    if ("e+" in text or "e-" in text or ".0," in text or ".0]" in text or ".0}" in text) and (
            _has_float_to_rewrite(msg)):
        text = _RUBY_FLOAT_TOKENS.sub(_ruby_float_token, text)
    return text


def _has_float_to_rewrite(value: Any) -> bool:
    """Whether Ruby would write a float in ``value`` differently (see _RUBY_FLOAT_TOKENS)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float):
            a = abs(v)
            if a >= 1e15 or 0 < a < 1e-4:
                text = repr(a)
                if ("e" in text and "." not in text) or (a < 1e16 and v.is_integer()):
                    return True
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return False


def _ruby_float_token(m: re.Match) -> str:
    """A float token as Ruby's Float#to_s writes it (see _RUBY_FLOAT_TOKENS); a string as it is."""
    number = m.group(1)
    if number is None:
        return m.group(0)
    sign = "-" if number.startswith("-") else ""
    number = number.lstrip("-")
    if "e" in number:  # Python: 1e+20 -> Ruby: 1.0e+20
        mantissa, exponent = number.split("e")
        return f"{sign}{mantissa}.0e{exponent}"
    # integer-valued, 1e15 <= |x| < 1e16: Python 1234567890123456.0 -> Ruby 1.234567890123456e+15
    digits = number[:-2].rstrip("0")
    return f"{sign}{digits[0]}.{digits[1:] or '0'}e+15"


def with_field(raw: bytes, msg: dict, key: str, value: Any) -> bytes | str:
    """The payload ``raw`` (parsed as ``msg``) with ``key`` set to ``value``. A new key is
    appended to the producer's own bytes, so a PHP producer's ``\\/`` escapes and spacing
    survive; an existing one means re-encoding the job the way Sidekiq re-encodes it."""
    if key not in msg:
        body = raw.rstrip()[:-1].rstrip()
        sep = b"," if msg else b""
        return body + sep + f"{dumps(key)}:{dumps(value)}}}".encode()
    return dumps({**msg, key: value})


def crash_count(msg: dict) -> int:
    """How many workers this job killed in a row (0 when the key is absent or unusable)."""
    value = msg.get(CRASHES)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def queue_of(msg: dict) -> str | None:
    """The queue a job goes to when it is pushed again (a due job, an operator's retry): its
    ``"queue"`` when that is a non-empty string, "default" when it has none (Sidekiq's client
    fills it in so); None when it is empty, null or not a string: it names no queue. Sidekiq
    6.4's client refuses such a job ("Job must include a valid queue name"), and its poller and
    its API's retry, which take the job out first, lose it; queued never pushes it, to
    "default" or anywhere (the scheduler sends it to dead, an operator's retry leaves it)."""
    if "queue" not in msg:
        return "default"
    queue = msg["queue"]
    return queue if isinstance(queue, str) and queue else None


def no_queue(msg: dict) -> str:
    """Why ``queue_of(msg)`` is None, in words."""
    try:
        shown = json.dumps(msg.get("queue"), ensure_ascii=True)[:100]
    except (TypeError, ValueError):
        shown = type(msg.get("queue")).__name__
    return f'a job must name its queue: its "queue" is {shown}'


def job_class_name(msg: dict) -> str:
    """The class to show: ActiveJob's wrapped class or a display_class, else ``class``."""
    return str(msg.get("display_class") or msg.get("wrapped") or msg.get("class") or "?")
