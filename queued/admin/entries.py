"""A job as an operator sees it (``Entry``: a member of a queue or a sorted set, parsed lazily),
and what to pick jobs by (``Filter``: class, queue, error text, argument text, jids).

Pure: no Redis here. ``jobsets.py`` and ``queues.py`` make entries from what Redis returns.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import zlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable

from .. import activejob
from ..payload import job_class_name, json_object, queue_of, to_epoch
from ..tracking import TASK_FIELD
from .ctltext import as_json_text, shown_json
from .names import to_key

_PLAIN = re.compile(r"[A-Za-z0-9_.@-]+")
#: What a backtrace may inflate to (the blob is data from Redis, not trusted).
BACKTRACE_MAX = 1 << 20


class Entry:
    """One job where it sits: ``raw`` is the member exactly as stored (acting on it removes
    exactly these bytes), ``score`` its zset score (when it runs, failed or died), ``source``
    the key's role (``schedule``, ``retry``, ``dead`` or ``queue:<name>``)."""

    __slots__ = ("raw", "score", "source", "__dict__")

    def __init__(self, raw: bytes, score: float | None, source: str):
        self.raw = raw
        self.score = score
        self.source = source

    def __repr__(self) -> str:
        return f"<Entry {self.source} {self.jid} {self.klass}>"

    @cached_property
    def msg(self) -> dict | None:
        """The job as a dict, or None when the member is not a JSON object (an unusable
        element sent to dead as it came)."""
        return json_object(self.raw)

    def _get(self, key: str, default: Any = None) -> Any:
        msg = self.msg
        return default if msg is None else msg.get(key, default)

    @property
    def jid(self) -> str:
        jid = self._get("jid")
        return jid if isinstance(jid, str) else ""

    @property
    def klass(self) -> str:
        """The class to show: ActiveJob's wrapped class or a display_class, else ``class``
        ("?" when there is none; an empty one is shown empty, ``""``, not as "?")."""
        msg = self.msg
        if msg is None:
            return "?"
        shown = job_class_name(msg)
        return "" if shown == "?" and msg.get("class") == "" else shown

    @property
    def queue(self) -> str:
        """The queue it is in, or its payload names: ``""`` as it is (a retry leaves such a
        job: ``destination``), "default" when the payload has none, another JSON value as
        its JSON (``null``)."""
        if self.source.startswith("queue:"):
            return self.source[len("queue:"):]
        msg = self.msg
        if msg is None or "queue" not in msg:
            return "default"
        queue = msg["queue"]
        return queue if isinstance(queue, str) else text_of(queue) or "null"

    @property
    def destination(self) -> str | None:
        """The queue a retry pushes it to (payload.queue_of), None when its payload names
        none (``"queue"`` empty, null, not a string: it stays where it is). A member that is
        not a job goes to "default", where a worker sends it to dead with the reason."""
        if self.source.startswith("queue:"):
            return self.source[len("queue:"):]
        return "default" if self.msg is None else queue_of(self.msg)

    @property
    def args(self) -> list:
        """The arguments to show (ActiveJob's unwrapped, as Sidekiq's Web UI shows them)."""
        msg = self.msg
        if msg is None:
            return []
        if activejob.is_wrapped(msg):
            args, kwargs = activejob.arguments(msg)
            return [*args, kwargs] if kwargs else args
        args = msg.get("args")
        return args if isinstance(args, list) else []

    @property
    def error_class(self) -> str:
        return text_of(self._get("error_class"))

    @property
    def error_message(self) -> str:
        return text_of(self._get("error_message"))

    @property
    def backtrace(self) -> list[str]:
        """The lines of its ``error_backtrace``, innermost first; [] when it has none."""
        return backtrace_lines(self._get("error_backtrace"))

    @property
    def retry_count(self) -> int | None:
        count = self._get("retry_count")
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    def epoch(self, key: str) -> float | None:
        """A timestamp field as float epoch seconds (Sidekiq 8's integer milliseconds too)."""
        return to_epoch(self._get(key))

    @property
    def enqueued_at(self) -> float | None:
        return self.epoch("enqueued_at")

    def as_dict(self) -> dict:
        """What ``queuedctl ... --json`` prints for a job: the payload and where it sits."""
        return {"source": self.source, "score": self.score, "jid": self.jid,
                "class": self.klass, "queue": self.queue, "args": self.args,
                "error_class": self.error_class or None,
                "error_message": self.error_message or None,
                "retry_count": self.retry_count,
                "payload": self.msg if self.msg is not None else
                self.raw.decode("utf-8", "replace")}


def text_of(value: Any) -> str:
    """A payload's field as text: a string as it is, nothing as "", anything else as its JSON
    (an error class written as ["x"] read "['x']", Python's repr: red team RT4, finding 6)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class Filter:
    """What to pick jobs by; every given criterion must hold. ``klass``: the class or the
    shown (ActiveJob wrapped) class, exactly; ``queue``: exactly; ``error``: a substring of
    error_class or error_message, any case; ``error_class``: the error class, exactly (one
    group of ``queuedctl errors`` with ``klass``: red team RT1, finding 13); ``arg``: a
    substring of the arguments as JSON, compact (``["a",1]``) or as the dashboard shows them
    (``["a", 1]``), where a control or an invisible character is its escape (``\\u0000``,
    ``\\u200b``: one typed raw is looked for so); ``jids``: one of these jids; ``task``: a job of this
    task (its payload's ``task_id``)."""

    klass: str | None = None
    queue: str | None = None
    error: str | None = None
    arg: str | None = None
    jids: frozenset[str] | None = None
    task: str | None = None
    error_class: str | None = None

    @classmethod
    def of(cls, *, klass=None, queue=None, error=None, arg=None,
           jids: Iterable[str] | None = None, task: str | None = None,
           error_class: str | None = None) -> Filter:
        return cls(klass, queue, error, arg, frozenset(jids) if jids else None, task,
                   error_class)

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.klass, self.queue, self.error, self.arg,
                                           self.jids, self.task, self.error_class))

    def matches(self, entry: Entry) -> bool:
        if self.jids is not None and entry.jid not in self.jids:
            return False
        if self.task is not None and entry._get(TASK_FIELD) != self.task:
            return False
        if self.klass is not None and self.klass not in (entry.klass, entry._get("class")):
            return False
        if self.queue is not None and entry.queue != self.queue:
            return False
        if self.error_class is not None and entry.error_class != self.error_class:
            return False
        if self.error is not None:
            text = f"{entry.error_class}: {entry.error_message}".lower()
            if self.error.lower() not in text:
                return False
        if self.arg is not None and not _in_arguments(as_json_text(self.arg), entry.args):
            return False
        return True

    def spelled(self) -> str:
        """The filter as one text, the same in every process (a question's copy is bound to
        the search it counted: snapshot.py)."""
        return json.dumps([self.klass, self.queue, self.error, self.arg,
                           sorted(self.jids) if self.jids is not None else None, self.task,
                           self.error_class])

    def pattern(self) -> bytes | None:
        """A ZSCAN/SCAN MATCH pattern every matching member fits (it narrows what Redis
        sends), or None: the jid (as a whole JSON string) when there is one and every
        encoder spells it alike, else the task's id, else the argument text."""
        if self.jids is not None and len(self.jids) == 1:
            return jid_pattern(next(iter(self.jids)))
        if self.task is not None and _PLAIN.fullmatch(self.task):
            return f"*{self.task}*".encode()
        # Only text every JSON encoder writes the same way (no quotes, escapes, slashes,
        # separators or spaces, whose spelling varies from producer to producer).
        if self.arg is not None and _PLAIN.fullmatch(self.arg):
            return f"*{self.arg}*".encode()
        return None


def _in_arguments(text: str, args: list) -> bool:
    """Whether ``text`` is in the arguments' JSON, as queuedctl writes it (compact) or as the
    dashboard shows it (a space after each separator), hidden characters escaped either way
    (ctltext.shown_json)."""
    return text in shown_json(args, (",", ":")) or text in shown_json(args)


def jid_spellings(jid: str) -> list[bytes]:
    """The ways a JSON encoder writes ``jid`` as a string, quotes included: plainly (Ruby,
    Node, Go), with ``\\/`` for a slash (PHP's json_encode), with ``\\u00e9`` for a
    character past ASCII (PHP, Python's json.dumps; the hex in either case), and each of
    those together (red team RT1, finding 8: PHP's jobs ``ab\\/cd`` and ``caf\\u00e9`` were
    shown by ``jobs`` but never found by their jid). A search for the spelling with its
    quotes finds only a string equal to the jid, not every job with the text inside
    (finding 3: ``find a``)."""
    plain = json.dumps(jid, ensure_ascii=False)
    spellings = {plain}
    if "/" in jid:
        spellings.add(plain.replace("/", "\\/"))
    if not jid.isascii():
        for text in list(spellings):
            escaped = json.dumps(json.loads(text), ensure_ascii=True)  # (lower-case hex)
            escaped = escaped.replace("/", "\\/") if "\\/" in text else escaped
            spellings.add(escaped)
            spellings.add(re.sub(r"\\u[0-9a-f]{4}", lambda m: m.group().upper()
                                 .replace("\\U", "\\u"), escaped))
    return sorted(to_key(text) for text in spellings)


def jid_pattern(jid: str) -> bytes | None:
    """The MATCH pattern of ``jid`` when every encoder spells it alike (else None: a scan
    that reads every member, each checked by its parsed jid)."""
    spellings = jid_spellings(jid)
    if len(spellings) != 1:
        return None
    return b"*" + glob_escape(spellings[0]) + b"*"


def backtrace_lines(blob: Any) -> list[str]:
    """Sidekiq's ``error_backtrace``: base64 of zlib of a JSON list of lines (Sidekiq 6+ and
    queued), or the list itself (before 6.0). The blob is data from Redis, not trusted: it is
    inflated to BACKTRACE_MAX at most (a zip bomb is cut there and said to be too large), and
    one that cannot be read (not base64, not zlib, a cut stream, not a JSON list, nested past
    what the parser recurses into) says so in one line."""
    if isinstance(blob, list):
        return [str(line) for line in blob]
    if not isinstance(blob, str) or not blob:
        return []
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(blob), BACKTRACE_MAX)
        if inflater.unconsumed_tail:
            return [f"(the backtrace is larger than {BACKTRACE_MAX >> 20} MiB: not shown)"]
        lines = json.loads(raw) if inflater.eof else None  # (not eof: a cut stream)
    except (binascii.Error, zlib.error, ValueError, RecursionError):
        return ["(the backtrace could not be read)"]
    if not isinstance(lines, list):
        return ["(the backtrace could not be read)"]
    return [str(line) for line in lines]


def glob_escape(text: bytes) -> bytes:
    """``text`` matched literally in a MATCH pattern."""
    return bytes(b for c in text for b in ((0x5C, c) if c in b"*?[]\\" else (c,)))
