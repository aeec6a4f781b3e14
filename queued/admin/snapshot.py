"""What a bulk action walks: a copy of the set or queue taken in one step when the action
begins (issue 16). The action reads the copy, which nothing else writes, and acts on the live
key, each job guarded by its presence there.

Walking the live key instead cannot be exact: ``ZSCAN`` may return a member added during the
walk, and a retried job that fails again comes back into ``dead`` or ``retry`` as a new
member, which one "retry all" then retried again (5,000 dead jobs gave 8,155 retries); a list
paged by offset from the end workers pop shifts under the walk and skips jobs. The copy holds
exactly the jobs present at the start, read by index once each.

``COPY`` costs Redis O(N) once (about 50 ms for 100,000 dead jobs, measured on a loaded 2-core
machine): less than the per-job writes of the action itself. The copy has a TTL, renewed as
the walk goes on, so one left by an admin that died goes away by itself.

The copy is also what a question counts (red team RT1, finding 7): ``queuedctl`` counts the
jobs of the copy it then acts on, so "delete 3 jobs from dead?" deletes at most those 3 however
many died while the operator read it. The dashboard asks in one request and acts in another:
its count is taken on a copy it keeps (``held``, HELD_TTL at most) and names by its token in
the question; the action resumes that copy (``Snapshot.resume``). An action on several keys
copies them all in one step (``together``) before acting on any (finding 1: a job retried
from ``retry`` that dies at once must not be retried again from ``dead``).

Each copy leaves a mark, bound to what was counted (the key and the search: ``bound``), which
the answer takes (``claim``, ``resume``): a question is answered once, by the action it was
asked for (red team RT4, finding 5: one token posted twice at once was taken twice, a token
counted on Dead was taken by the Retries page), and an answer after the copy has expired does
nothing and says so (finding 2: queuedctl said "0 jobs deleted").
"""
from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
from typing import Any, Callable, Iterator, Sequence

import redis as redis_lib

from ..keys import Keys

#: Seconds a copy outlives the last page read from it (an admin killed mid-walk leaves it).
TTL = 600
#: Seconds a copy counted for the dashboard's question waits for the answer (a question left
#: open longer is asked again: the action says so and does nothing).
HELD_TTL = 300
#: What a token looks like: the random part, and a suffix when one question copies several
#: keys (a task's ``retry`` and ``dead``). Anything else from a form is not a token.
TOKEN = re.compile(r"[0-9a-f]{24}(?:-[a-z]{1,16})?")


class Gone(LookupError):
    """The copy a question counted is no longer there (answered too late, or used already)."""


class Snapshot:
    """``with Snapshot(r, keys, key, "zset") as snap: for rows in snap.pages(500): ...``.
    ``rows`` are (member, score) pairs, lowest score first, for a sorted set; the elements
    from the end workers take first (the next to run first) for a list."""

    def __init__(self, r: redis_lib.Redis, keys: Keys, key: str | bytes, kind: str, *,
                 take: bool = False, also: Callable[[Any], Any] | None = None,
                 held: bool = False, token: str | None = None, bound: str = ""):
        """``take``: move the key itself (RENAME, O(1)): the live key is emptied in the same
        step, as a clear does; ``also(pipe)`` adds commands to that step. ``held``: the copy
        outlives the ``with`` (HELD_TTL) for an action that ``resume``s it by ``token``.
        ``bound``: what the copy is counted for besides its key (a search), which the answer
        must name the same."""
        if kind not in ("zset", "list"):
            raise ValueError(f"no snapshot of a {kind}")
        self.r = r
        self.source = key
        self.kind = kind
        self.take = take
        self.also = also
        self.held = held
        self.token = token or secrets.token_hex(12)
        self.key = keys.snapshot(self.token)
        #: Says the copy was taken, for what (``_binding``), until its answer takes the mark:
        #: a copy of an empty set is no key, and its answer must still find it (and act on
        #: nothing), not take it for one answered already.
        self.mark = keys.snapshot_held(self.token)
        self.binding = _binding(kind, key, bound)
        self.count = 0  #: how many elements the key held when the snapshot was taken
        self.resumed = False

    @classmethod
    def resume(cls, r: redis_lib.Redis, keys: Keys, token: str, kind: str,
               key: str | bytes, bound: str = "") -> Snapshot:
        """The copy a question counted (``held``) of ``key`` for ``bound``, to act on; Gone
        when it is not there, was counted for something else, or ``token`` is not one. The
        answer takes the copy's mark, once (``claim``); leaving the ``with`` deletes the copy."""
        if not isinstance(token, str) or not TOKEN.fullmatch(token):
            raise Gone(f"{token!r} is not a question's token")
        snap = cls(r, keys, key, kind, token=token, bound=bound)
        snap.held = snap.resumed = True
        if r.get(snap.mark) not in (None, snap.binding.encode()):
            raise Gone("that question counted other jobs (another set, queue or search)")
        snap.claim()
        pipe = r.pipeline(transaction=True)
        pipe.type(snap.key)
        pipe.zcard(snap.key) if kind == "zset" else pipe.llen(snap.key)
        found, count = pipe.execute(raise_on_error=False)
        if found.decode() not in (kind, "none"):
            raise Gone(snap._gone())
        snap.count = int(count)
        return snap

    def claim(self) -> None:
        """The answer to the question this copy was counted for: Gone when the copy has
        expired (an answer after its TTL) or another answer took it (DEL of the mark says
        which answer is the one: two sent at once both found it there)."""
        if self.r.delete(self.mark) != 1:
            raise Gone(self._gone())

    def _gone(self) -> str:
        return ("the jobs counted for that question are gone (it was asked more than "
                f"{(HELD_TTL if self.held else TTL) // 60} minutes ago, or answered already)")

    def __enter__(self) -> Snapshot:
        if self.resumed:  # (the copy exists already)
            return self
        self._check_type()
        pipe = self.r.pipeline(transaction=True)
        self._commands(pipe)
        self._settle(pipe.execute(raise_on_error=False))
        return self

    def _check_type(self) -> None:
        kind = self.r.type(self.source).decode()
        if kind not in ("none", self.kind):
            shown = (self.source.decode("utf-8", "backslashreplace")
                     if isinstance(self.source, bytes) else self.source)
            raise redis_lib.ResponseError(
                f"WRONGTYPE {shown} holds a {kind}, not a {self.kind}: left as it is")

    def _commands(self, pipe) -> None:
        """This copy's commands in the step that takes it (their replies: _settle)."""
        pipe.zcard(self.source) if self.kind == "zset" else pipe.llen(self.source)
        if self.take:
            pipe.rename(self.source, self.key)  # (an error when there is no key: nothing taken)
        else:
            pipe.execute_command("COPY", self.source, self.key)
        pipe.expire(self.key, HELD_TTL if self.held else TTL)
        pipe.set(self.mark, self.binding, ex=HELD_TTL if self.held else TTL)
        if self.also:
            self.also(pipe)

    def _settle(self, replies: list) -> None:
        if isinstance(replies[0], Exception):  # its type changed since TYPE: put it back
            if self.take:
                self.r.rename(self.key, self.source)
                self.r.persist(self.source)
            else:
                self.r.unlink(self.key)
            raise replies[0]
        self.count = int(replies[0])

    def __exit__(self, *exc) -> None:
        if not self.held or self.resumed:
            self.r.unlink(self.key, self.mark)

    def pages(self, batch: int) -> Iterator[list]:
        """The copy, ``batch`` elements at a time, each element once."""
        start = 0
        while True:
            pipe = self.r.pipeline(transaction=False)
            if self.kind == "zset":
                pipe.zrange(self.key, start, start + batch - 1, withscores=True)
            else:  # from the right: the order workers take the queue in
                pipe.lrange(self.key, -start - batch, -start - 1)
            pipe.expire(self.key, HELD_TTL if self.held else TTL)
            rows = pipe.execute()[0]
            if self.kind == "list":
                rows.reverse()
            if rows:
                yield rows
            if len(rows) < batch:
                return
            start += batch


def _binding(kind: str, key: str | bytes, bound: str) -> str:
    """What a copy is counted for, as its mark holds it: its key (as bytes: a name that is not
    UTF-8 too) and ``bound``."""
    raw = key if isinstance(key, bytes) else key.encode("utf-8", "surrogatepass")
    text = f"{kind}\0{raw.hex()}\0{bound}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(text).hexdigest()


@contextlib.contextmanager
def together(snaps: Sequence[Snapshot]) -> Iterator[Sequence[Snapshot]]:
    """Copy several keys in one step (MULTI/EXEC: the same instant for all of them), for an
    action that acts on every job present in any of them then, once (taskadmin.py: a task's
    errors in ``retry`` and ``dead``)."""
    for snap in snaps:
        snap._check_type()
    pipe = snaps[0].r.pipeline(transaction=True)
    sizes = []
    for snap in snaps:
        before = len(pipe.command_stack)
        snap._commands(pipe)
        sizes.append(len(pipe.command_stack) - before)
    replies = pipe.execute(raise_on_error=False)
    try:
        start = 0
        for snap, size in zip(snaps, sizes):
            snap._settle(replies[start:start + size])
            start += size
        yield snaps
    finally:
        for snap in snaps:
            snap.__exit__(None, None, None)
