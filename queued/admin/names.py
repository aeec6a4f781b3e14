"""Names read from Redis (queues, process identities, task ids) as text that addresses exactly the
same bytes again, whatever those bytes are.

Redis keys and set members are bytes; a Ruby or PHP producer may push to ``queue:\\xff\\xfe``.
Decoded as UTF-8 such a name raised (every page listing queues was a 500, and ``queuedctl
queues`` failed); decoded with ``replace`` it becomes another name, and an action on it
would address another key. So a name is decoded with ``surrogateescape`` (each byte that is not
UTF-8 becomes one code point U+DC80..U+DCFF) and encoded back the same way when it goes
to Redis: ``to_key(name_of(b)) == b`` for any bytes ``b``.

The operator's side builds the keys and members of such names with ``to_key``: bytes, which
redis-py sends as they are (text it encodes as strict UTF-8 whatever the client's
``encoding_errors``: hiredis packs commands itself). queued.Task builds a task's keys as text,
so the dashboard and queuedctl read tasks through a client whose keys are ``ExactKeys``.

A name may also come from a job's JSON, whose ``"queue": "emails-\\ud83d"`` (Node's
JSON.stringify of an emoji cut in half) is a lone surrogate no UTF-8 holds: it raised in the
middle of a bulk retry, which stopped there (red team RT1, finding 6). ``to_key`` writes such
a code point as U+FFFD, the bytes a producer in JavaScript or Ruby sent for it when it pushed
to that queue (their UTF-8 encoders replace it), so the job goes back beside its siblings.
"""
from __future__ import annotations

import codecs
from typing import Iterable

from ..keys import Keys


def name_of(raw: bytes | str) -> str:
    """A name as Redis holds it (bytes), as text; ``to_key`` gives the bytes back."""
    return raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")


def names_of(raws: Iterable[bytes]) -> list[str]:
    return [name_of(r) for r in raws]


def _key_bytes(error: UnicodeError) -> tuple[bytes, int]:
    """The ``queued-key`` error handler: surrogateescape's bytes, U+FFFD for any other
    surrogate."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out = bytearray()
    for c in error.object[error.start:error.end]:
        code = ord(c)
        out += bytes([code - 0xDC00]) if 0xDC80 <= code <= 0xDCFF else "\ufffd".encode()
    return bytes(out), error.end


codecs.register_error("queued-key", _key_bytes)


def to_key(text: str | bytes) -> bytes:
    """The bytes of a key or member built from names read with name_of (or from a job's
    JSON: any text becomes bytes, never an error)."""
    return text if isinstance(text, bytes) else text.encode("utf-8", "queued-key")


def is_exact(text: str) -> bool:
    """True when ``text`` is plain UTF-8 (no byte that was not, no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class ExactKeys(Keys):
    """Keys whose task keys are bytes (``to_key``): handed to queued.Task, a task id read with
    name_of addresses that task's own keys. Every other key is Keys' own."""

    __slots__ = ("_text",)

    def __init__(self, namespace: str | None = None):
        super().__init__(namespace)
        self._text = Keys(namespace)

    def task(self, task_id: str) -> bytes:  # type: ignore[override]
        return to_key(self._text.task(task_id))

    def task_keys(self, task_id: str) -> list[bytes]:  # type: ignore[override]
        return [to_key(k) for k in self._text.task_keys(task_id)]
