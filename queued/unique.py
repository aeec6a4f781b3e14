"""Unique jobs (Sidekiq Enterprise's ``unique_for``): the lock, shared by the producer, the daemon
and the operator's side.

A job is unique when its payload carries ``unique_for`` (seconds; a class option, or
``set(unique_for=...)``, or a Ruby/PHP producer's own key). Jobs are alike when their (class,
queue, args) are; the lock of such a job is one Redis string, ``queued:unique:<digest>``,
holding the jid of the job that has it, with a TTL of ``unique_for`` (plus the delay of a
scheduled job). There is no index of locks: each one expires by itself, so none can outlive
its period, whatever crashes (sidekiq-unique-jobs #14, #486, #955 left locks for ever; its
global digest set grew to 3 GB, #821).

Who takes it:
- queued's client, at the push, in the same Lua step as the push (unique_push.lua): a
  duplicate push is dropped (``perform_async`` returns None) and counted;
- the worker, when a job starts (unique_start.lua): a Ruby or PHP producer pushed it without
  a lock (its client cannot drop a duplicate), so it takes it then. If another jid holds it,
  a copy is pending or running: this one is not run now but put off (never two at once).

It is held while the job waits in ``schedule`` or ``retry``; a job's own jid never conflicts
with it (a retry, or a job put back after a crash, finds its own lock). It is given up when
the job succeeds (or when it starts, with ``unique_until: "start"``), dies, expires, or an
operator deletes or kills it (unique_release.lua, only if that jid still holds it), and
otherwise when its TTL runs out.

The digest is written into the payload (``unique_digest``), so a job whose queue changes
(``retry_queue``) still finds its lock; a payload without one gets it computed from its
(class, queue, args), its queue being the one it was taken from when it names none.

A job pushed without a jid runs under a jid made from its bytes (payload.derived_jid): two
identical pushes share it. Its run holds the lock as ``<jid>:<nonce>`` (run_holder), so the
second copy finds the lock held by another and is put off, under a jid of its own; the job's
later payloads (a retry) carry the jid, and a lock ``<jid>:<nonce>`` is theirs too.
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Iterable, NamedTuple

from .connection import Script
from .keys import Keys
from .payload import MAX_SECONDS, check_seconds, dumps, seconds_of

#: Payload keys: the lock period in seconds, when it ends ("success", the default, or
#: "start"), and the digest of the job's (class, queue, args).
UNIQUE_FOR, UNIQUE_UNTIL, DIGEST = "unique_for", "unique_until", "unique_digest"
UNTIL = ("success", "start")
_HEX40 = re.compile(r"[0-9a-f]{40}")

_LUA = os.path.join(os.path.dirname(__file__), "lua")
UNIQUE_PUSH = Script(_LUA, "unique_push")
UNIQUE_START = Script(_LUA, "unique_start")
UNIQUE_RELEASE = Script(_LUA, "unique_release")


class Lock(NamedTuple):
    """The lock of one unique job: its key, the jid that holds (or will hold) it, its TTL."""
    key: str
    jid: str
    ttl_ms: int
    until_start: bool


def period(msg: dict) -> float | None:
    """The job's ``unique_for`` in seconds, or None: not a unique job (absent, or not a
    positive number: a foreign producer's odd value is ignored rather than failing the job).
    A bigger one than MAX_SECONDS is MAX_SECONDS (payload.seconds_of: 1e308 or 10**400
    raised OverflowError on every take, 1e20 made Redis refuse the lock's expiry)."""
    return seconds_of(msg.get(UNIQUE_FOR))


def digest(msg: dict, queue: str | None = None) -> str:
    """The digest of a job's (class, queue, args): its own ``unique_digest`` if it carries a
    well-formed one, else SHA-1 of their JSON (the shape of Sidekiq Enterprise's key). A
    payload without a "queue" string (a hand-written push) is in ``queue``, the one it was
    taken from, else Sidekiq's "default": the queue its twin pushed by queued's client names
    (with null, the two named two locks and ran at once)."""
    given = msg.get(DIGEST)
    if isinstance(given, str) and _HEX40.fullmatch(given):
        return given
    named = msg.get("queue")
    if not isinstance(named, str) or not named:
        named = queue or "default"
    text = dumps([msg.get("class"), named, msg.get("args")])
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def lock_of(keys: Keys, msg: dict, delay: float = 0.0, queue: str | None = None,
            holder: str | None = None) -> Lock | None:
    """The lock of a parsed job (None if it is not unique); ``delay``: seconds until a
    scheduled job runs (its lock lasts that much longer); ``queue``: the queue it was taken
    from (see digest); ``holder``: what the lock holds (default: its jid; see run_holder)."""
    seconds = period(msg)
    if seconds is None:
        return None
    ttl_ms = max(1, int(min(seconds + max(0.0, delay), 2 * MAX_SECONDS) * 1000))
    return Lock(keys.unique(digest(msg, queue)), holder or str(msg.get("jid")), ttl_ms,
                msg.get(UNIQUE_UNTIL) == "start")


def run_holder(jid: str) -> str:
    """What the lock holds for a run of a job pushed without a jid: its jid (made from its
    bytes: two identical pushes share it) and a nonce of this run, so two copies never take
    the lock as their own. The job's later payloads (a retry) carry that jid as their own, and
    a lock ``<jid>:<nonce>`` is their own (unique_start.lua, unique_release.lua)."""
    return f"{jid}:{os.urandom(6).hex()}"


def check_item(item: dict) -> None:
    """A push's unique keys, checked as the options are (job.py): ValueError naming the key."""
    if UNIQUE_FOR in item:
        check_seconds(UNIQUE_FOR, item[UNIQUE_FOR])
    if UNIQUE_UNTIL in item and item[UNIQUE_UNTIL] not in UNTIL:
        raise ValueError(f'job "unique_until" must be "success" or "start", '
                         f'not {item[UNIQUE_UNTIL]!r}')


# --- releasing -----------------------------------------------------------------------------------

def release_call(locks: Iterable[tuple[str, str]]) -> tuple[list, list]:
    """KEYS and ARGV of unique_release.lua for (lock key, jid) pairs."""
    pairs = list(locks)
    return [key for key, _ in pairs], [jid for _, jid in pairs]


def held_by(keys: Keys, msgs: Iterable[dict | None],
            queue: str | None = None) -> list[tuple[str, str]]:
    """The (lock key, jid) of each unique job among ``msgs`` (parsed payloads; None skipped),
    taken from ``queue`` (for those without a "queue" key: see digest)."""
    out = []
    for msg in msgs:
        if msg is not None and period(msg) is not None and isinstance(msg.get("jid"), str):
            out.append((keys.unique(digest(msg, queue)), msg["jid"]))
    return out


def release(r: Any, keys: Keys, msgs: Iterable[dict | None], queue: str | None = None) -> int:
    """Give up the locks these jobs hold (those that hold one); the number released. For the
    master (a job it sent to dead) and the operator's side (a job deleted or killed)."""
    return release_pairs(r, held_by(keys, msgs, queue))


def release_pairs(r: Any, pairs: list[tuple[str, str]]) -> int:
    """Give up these (lock key, jid) locks, each if that jid holds it; the number released."""
    if not pairs:
        return 0
    return int(UNIQUE_RELEASE(r, *release_call(pairs)))
