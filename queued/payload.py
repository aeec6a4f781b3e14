"""Sidekiq's job payload: parsing, dumping and timestamps (SIDEKIQ_FORMAT.md section 3).

A payload is a JSON object. queued keeps every key it does not know, keeps key order (Python
dicts do, like Ruby hashes), keeps ``1`` and ``1.0`` distinct and integers of any size, and
dumps the way Ruby's ``JSON.generate`` does: no spaces, non-ASCII raw, ``/`` unescaped.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

from .errors import PayloadError

#: Integers above this are epoch milliseconds (Sidekiq 8), below it epoch seconds.
_MS_THRESHOLD = 10**11

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ascii_encoder = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def new_jid() -> str:
    """24 lowercase hex characters, like ``SecureRandom.hex(12)``."""
    return os.urandom(12).hex()


def now() -> float:
    return time.time()


def to_epoch(value: Any) -> float | None:
    """A payload timestamp as float seconds: float seconds (Sidekiq 6/7) or integer
    milliseconds (Sidekiq 8) are both accepted."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and value > _MS_THRESHOLD:
        return value / 1000.0
    return float(value)


def _not_json(name: str):
    # Python's json takes NaN and Infinity; JSON (and Ruby) do not, and dumps() could not
    # write them back.
    raise ValueError(f"{name} is not a JSON number")


def loads(raw: str | bytes) -> dict:
    """Parse a queue element into a job dict, or raise PayloadError saying why not."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PayloadError(
                f"payload is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        msg = json.loads(raw, parse_constant=_not_json)
    except ValueError as e:
        raise PayloadError(f"payload is not valid JSON: {e}") from None
    if not isinstance(msg, dict):
        raise PayloadError(f"payload is JSON {type(msg).__name__}, not an object")
    return msg


def validate(msg: dict) -> None:
    """Check the fields a server needs; raise PayloadError naming the first problem."""
    cls = msg.get("class")
    if not isinstance(cls, str) or not cls:
        raise PayloadError('payload has no "class" string')
    if "args" not in msg:
        raise PayloadError('payload has no "args"')
    if not isinstance(msg["args"], list):
        raise PayloadError(f'payload "args" is {type(msg["args"]).__name__}, not a list')
    jid = msg.get("jid")
    if not isinstance(jid, str) or not jid:
        raise PayloadError('payload has no "jid" string')


def dumps(msg: Any) -> str:
    """JSON text the way Sidekiq writes it. Falls back to ASCII escapes for strings that
    cannot be UTF-8 encoded (lone surrogates from ``\\ud800`` in PHP input), so a payload is
    never lost to an encoding error."""
    text = _encoder.encode(msg)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _ascii_encoder.encode(msg)
    return text


def job_class_name(msg: dict) -> str:
    """The class to show: ActiveJob's wrapped class or a display_class, else ``class``."""
    return str(msg.get("display_class") or msg.get("wrapped") or msg.get("class") or "?")
