"""Names read from Redis (queues, process identities, task ids) as text that addresses exactly the
same bytes again, whatever those bytes are.

Redis keys and set members are bytes; a Ruby or PHP producer may push to ``queue:\\xff\\xfe``.
Decoded as UTF-8 such a name raised (every page listing queues was a 500, and ``queuedctl
queues`` failed); decoded with ``replace`` it becomes another name, and an action on it
would address another key. So a name is decoded with ``surrogateescape`` (each byte that is not
UTF-8 becomes one code point U+DC80..U+DCFF) and encoded back the same way when it goes
to Redis: ``to_key(name_of(b)) == b`` for any bytes ``b``.

The operator's side builds the keys and members of such names with ``to_key`` (bytes, whatever the
client's own encoding), and makes its own clients with ``EXACT_NAMES`` so that any text it
hands redis-py (a task's keys built by queued.task) encodes the same way.
"""
from __future__ import annotations

from typing import Iterable

#: redis-py client options under which text made by name_of encodes back to its bytes.
EXACT_NAMES = {"encoding_errors": "surrogateescape"}


def name_of(raw: bytes | str) -> str:
    """A name as Redis holds it (bytes), as text; ``to_key`` gives the bytes back."""
    return raw if isinstance(raw, str) else raw.decode("utf-8", "surrogateescape")


def names_of(raws: Iterable[bytes]) -> list[str]:
    return [name_of(r) for r in raws]


def to_key(text: str) -> bytes:
    """The bytes of a key or member built from names read with name_of."""
    return text.encode("utf-8", "surrogateescape")


def is_exact(text: str) -> bool:
    """True when ``text`` is plain UTF-8 (no byte that was not, no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
