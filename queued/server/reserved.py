"""What a worker slot's reserved zset holds, and how the fetch scripts are called: pure.

A member of the reserved zset is ``queue NUL token NUL payload`` (reserve.lua writes it): a
``Reservation`` is one read back. fail.lua ends a reservation other than with an ack, and
reserve.lua takes the queues in the orders given here. The worker (fetch.py, sharedends.py,
outcomes.py) and the master (recovery.py) both build these calls and read these replies, so
they live apart from the worker's connection: the master's side imports nothing of it.

Owns no connection and sends nothing (fetch.py and recovery.py do).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from . import retry
from ..keys import Keys
from ..tracking import Move

#: fail.lua's replies: the failure is written; the reservation was gone (recovered by another
#: master: nothing written); refused: the target key holds another Redis type (nothing written,
#: the reservation kept and marked, so the caller retries the write later).
WRITTEN, GONE, REFUSED = 1, 0, -1


#: The per-job records (this and runner's) are slotted dataclasses, not NamedTuples:
#: Python 3.11 caches no read of a NamedTuple's field by name (each took ~130 instructions,
#: ~40 of them per job), where a slot's read is cached (issue 18). A Reservation is equal
#: and hashed by its fields as the tuple was, and never changed once made.
@dataclass(slots=True, unsafe_hash=True)
class Reservation:
    member: bytes   # exact bytes in the reserved zset (ack and fail remove exactly these)
    queue: str      # the queue the job was taken from (Sidekiq: this, not payload["queue"])
    payload: bytes  # the job JSON exactly as the producer wrote it


def split_member(member: bytes) -> tuple[str, bytes]:
    """``queue NUL token NUL payload`` -> (queue, payload)."""
    a = member.index(b"\0")
    b = member.index(b"\0", a + 1)
    return member[:a].decode("utf-8", "replace"), member[b + 1:]


def failure_call(keys: Keys, reserved_key: str, member: bytes, kind: str, score: float,
                 payload: str | bytes, dead_timeout: int, dead_max_jobs: int,
                 queue: str = "", task: Move | None = None) -> tuple[list, list]:
    """KEYS and ARGV of fail.lua, for the worker (Fetcher.fail) and the master alike. Kinds:
    retry, dead, drop; a job's own release: later (to schedule), queue (to ``queue``); done
    (a job of a task that succeeded). ``task``: the job's move in its task."""
    target = {"retry": keys.retry, "later": keys.schedule,
              "queue": keys.queue(queue)}.get(kind, keys.dead)
    trim = retry.dead_trim_bounds(score, dead_timeout, dead_max_jobs)
    ks = [reserved_key, target, keys.queues]
    args = [member, kind, repr(float(score)), payload, repr(trim.min_score_exclusive),
            trim.rank_stop, queue]
    if task is not None:
        ks += task.keys(keys)
        args += task.args(keys)
    return ks, args


def fetch_orders(names: Sequence[str], weighted: Sequence[str], strict: bool, n: int,
                 rng: random.Random) -> list[int]:
    """Queue orders for n fetches as 1-based indexes into ``names``, flattened.

    Strict: one fixed order (the script reuses it). Weighted: Sidekiq's ``shuffle.uniq`` of
    the weight-expanded list, drawn afresh for every job.
    """
    index = {name: i + 1 for i, name in enumerate(names)}
    if strict or len(names) == 1:
        return list(range(1, len(names) + 1))
    out: list[int] = []
    for _ in range(n):
        pool = list(weighted)
        rng.shuffle(pool)
        out.extend(index[q] for q in dict.fromkeys(pool))
    return out
