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
"""
from __future__ import annotations

import secrets
from typing import Any, Callable, Iterator

import redis as redis_lib

from ..keys import Keys

#: Seconds a copy outlives the last page read from it (an admin killed mid-walk leaves it).
TTL = 600


class Snapshot:
    """``with Snapshot(r, keys, key, "zset") as snap: for rows in snap.pages(500): ...``.
    ``rows`` are (member, score) pairs, lowest score first, for a sorted set; the elements
    from the end workers take first (the next to run first) for a list."""

    def __init__(self, r: redis_lib.Redis, keys: Keys, key: str, kind: str, *,
                 take: bool = False, also: Callable[[Any], Any] | None = None):
        """``take``: move the key itself (RENAME, O(1)): the live key is emptied in the same
        step, as a clear does; ``also(pipe)`` adds commands to that step."""
        if kind not in ("zset", "list"):
            raise ValueError(f"no snapshot of a {kind}")
        self.r = r
        self.source = key
        self.kind = kind
        self.take = take
        self.also = also
        self.key = keys.snapshot(secrets.token_hex(12))
        self.count = 0  #: how many elements the key held when the snapshot was taken

    def __enter__(self) -> Snapshot:
        kind = self.r.type(self.source).decode()
        if kind not in ("none", self.kind):
            shown = (self.source.decode("utf-8", "backslashreplace")
                     if isinstance(self.source, bytes) else self.source)
            raise redis_lib.ResponseError(
                f"WRONGTYPE {shown} holds a {kind}, not a {self.kind}: left as it is")
        pipe = self.r.pipeline(transaction=True)
        pipe.zcard(self.source) if self.kind == "zset" else pipe.llen(self.source)
        if self.take:
            pipe.rename(self.source, self.key)  # (an error when there is no key: nothing taken)
        else:
            pipe.execute_command("COPY", self.source, self.key)
        pipe.expire(self.key, TTL)
        if self.also:
            self.also(pipe)
        replies = pipe.execute(raise_on_error=False)
        if isinstance(replies[0], Exception):  # its type changed since TYPE: put it back
            if self.take:
                self.r.rename(self.key, self.source)
                self.r.persist(self.source)
            else:
                self.r.unlink(self.key)
            raise replies[0]
        self.count = int(replies[0])
        return self

    def __exit__(self, *exc) -> None:
        self.r.unlink(self.key)

    def pages(self, batch: int) -> Iterator[list]:
        """The copy, ``batch`` elements at a time, each element once."""
        start = 0
        while True:
            pipe = self.r.pipeline(transaction=False)
            if self.kind == "zset":
                pipe.zrange(self.key, start, start + batch - 1, withscores=True)
            else:  # from the right: the order workers take the queue in
                pipe.lrange(self.key, -start - batch, -start - 1)
            pipe.expire(self.key, TTL)
            rows = pipe.execute()[0]
            if self.kind == "list":
                rows.reverse()
            if rows:
                yield rows
            if len(rows) < batch:
                return
            start += batch
