"""Which reservation a slot record's job is: how the master finds the job a worker runs (or ran
when it died), to charge it, give back what waits behind it, or show it (rt2 finding 5).

A jid does not name a job: users give jobs fixed jids to make them idempotent, so a slot's
reserved zset may hold two members of one jid (a batch's finished job, its ack not sent yet,
and the one running; or the jobs of two lanes). Taking the first member with the record's jid
charged the wrong one with a crash or a timeout, gave the running job back to its queue while
it ran (giveback.py: it ran twice at once), and showed another job's payload as running. So a
record names its job's reservation:

- a job lane of a worker of many jobs at once writes its reservation's token (the unique middle
  of the member reserve.lua made, ``queue NUL token NUL payload``: slots.py);
- a worker of one job at a time writes how many jobs of its batch are reserved behind the one it
  runs (``held``): reserve.lua scores a batch in the order it runs it and nothing is reserved
  behind a batch while it runs, so the running job is that many members from the end. Its hot
  path writes nothing more for this.

Either way the member's jid must be the record's too, else the job is not found (one that
started as it landed is in the zset only once its reserve call was applied).

Does not own what is done with the job (recovery.py, giveback.py, heartbeat.py).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import redis

from ..payload import jid_of
from .reserved import Reservation, split_member
from .slots import SlotView, stored_jid


class Running(NamedTuple):
    """A job a slot record names: its jid (as the table stores it) and either its reservation's
    token (a job lane) or how many jobs of its batch wait behind it."""
    jid: str
    token: str = ""
    behind: int = 0

    @classmethod
    def of(cls, v: SlotView, behind: int | None = None) -> Running:
        return cls(v.jid, v.token, v.held if behind is None else behind)


def token_of(member: bytes) -> bytes:
    """A reserved member's token (b"" for a job started as it landed: no member yet)."""
    a = member.find(b"\0")
    return member[a + 1:member.index(b"\0", a + 1)] if a >= 0 else b""


def _jid(member: bytes) -> str | None:
    found = jid_of(split_member(member)[1])
    return stored_jid(found) if found is not None else None


def find(members: Sequence[bytes], job: Running) -> bytes | None:
    """The member of ``members`` (a slot's reserved zset, lowest score first) that is ``job``.
    Without a token: the one ``behind`` members from the end, or the last one if the master
    gave back those behind it (giveback.py: the record still counts them); a finished copy of
    the same jid sits before it (acks only take members from the front). Failing both (a
    record that does not match what is reserved), the last member of its jid."""
    if job.token:
        token = job.token.encode()  # (the record keeps 32 bytes of it: slots.LaneWriter)
        return next((m for m in members if token_of(m)[:32] == token and _jid(m) == job.jid),
                    None)
    for i in (len(members) - 1 - job.behind, len(members) - 1):
        if i >= 0 and _jid(members[i]) == job.jid:
            return members[i]
    return next((m for m in reversed(members) if _jid(m) == job.jid), None)


def reservations(r: redis.Redis, key: str, jobs: Sequence[Running]) -> dict[Running, Reservation]:
    """The reservations of ``jobs`` in the zset ``key``, read in one call: those found."""
    found: dict[Running, Reservation] = {}
    if not jobs:
        return found
    members = r.zrange(key, 0, -1)
    for job in jobs:
        member = find(members, job)
        if member is not None:
            found[job] = Reservation(member, *split_member(member))
    return found
