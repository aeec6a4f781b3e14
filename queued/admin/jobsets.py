"""The sorted sets of jobs: ``schedule``, ``retry`` and ``dead``, as Sidekiq's ScheduledSet,
RetrySet and DeadSet: page through them, find a job, filter, and act on one job or on every
match (retry now, delete, kill to dead, reschedule).

Every action is atomic per job and guarded by the job's presence (admin/lua/move.lua): a job
taken meanwhile by the scheduler, a worker or another admin is simply not acted on, so nothing
is lost, done twice or left in two places. Bulk actions walk a copy of the set taken when they
begin (snapshot.py: each job present then is acted on once at most, a job that enters the set
meanwhile never), decide in Python, and act in batches of ``BATCH`` jobs per round trip:
retrying 100,000 dead jobs is a few hundred round trips. A question counts the jobs of such a
copy, and the action then walks that same copy (``snapshot=``): it acts on at most the jobs
counted (red team RT1, finding 7). ``act_together`` copies several sets in one step before
acting on any (finding 1).
"""
from __future__ import annotations

import os
import time
from typing import Callable, Iterable, Iterator, Sequence

import redis as redis_lib

from ..connection import Script
from ..payload import dumps, no_queue, with_field
from ..keys import Keys
from . import deadlimits
from .deadlimits import DeadLimits
from .entries import Entry, Filter
from .locks import release_removed, release_taken
from .names import to_key
from .snapshot import Snapshot, together
from .taskmarks import mark_removed, mark_taken

MOVE = Script(os.path.join(os.path.dirname(__file__), "lua"), "move")

#: Jobs per round trip in a bulk action, and per ZSCAN call.
BATCH = 500
#: A kick (a dead job retried by hand) is counted in the job, as Beanstalkd's stats-job counts
#: kicks; releases and buries are counted by the worker (job operations).
KICKS = "kick_count"

Progress = Callable[[int, int], None]  # (examined so far, acted on so far)
#: Why a retry leaves a job where it is (Unmovable.kind).
NO_QUEUE = 'its payload names no queue ("queue" is "", null or not a string)'
NOT_A_JOB = "not a job (not JSON, not UTF-8, not a JSON object)"


class Unmovable(ValueError):
    """A retry (or run now) of a job that has nowhere to go: its payload names no queue
    (payload.queue_of: Sidekiq 6.4's client refuses it; queued pushes it neither to "default"
    nor anywhere), or a member of Dead that is not a job. The job is left where it is."""

    def __init__(self, entry: Entry, kind: str, reason: str):
        super().__init__(reason)
        self.entry, self.kind, self.reason = entry, kind, reason
#: How a set reads in a removed task job's error ("deleted by an operator from the retry set").
WHERE = {"schedule": "the schedule", "retry": "the retry set", "dead": "the dead set"}


class JobSet:
    """``schedule``, ``retry`` or ``dead``. Made by ``Admin.scheduled``/``retries``/``dead``."""

    def __init__(self, r: redis_lib.Redis, keys: Keys, name: str,
                 dead_limits: DeadLimits | None = None):
        self.r = r
        self.keys = keys
        self.name = name
        self.key = getattr(keys, name)
        #: dead's bounds when no live daemon publishes its own (deadlimits.py)
        self.dead_limits = dead_limits

    def __repr__(self) -> str:
        return f"<JobSet {self.name}>"

    def size(self) -> int:
        return int(self.r.zcard(self.key))

    def page(self, offset: int = 0, limit: int = 25,
             newest_first: bool | None = None) -> list[Entry]:
        """``limit`` jobs from ``offset``: the soonest due first for schedule and retry, the
        latest death first for dead (as Sidekiq's Web UI lists them)."""
        newest_first = self.name == "dead" if newest_first is None else newest_first
        fetch = self.r.zrevrange if newest_first else self.r.zrange
        rows = fetch(self.key, offset, offset + limit - 1, withscores=True)
        return [Entry(member, score, self.name) for member, score in rows]

    def scan(self, where: Filter | None = None, *, limit: int | None = None,
             progress: Progress | None = None) -> Iterator[Entry]:
        """Every job (that matches ``where``), each at least once, without loading the set:
        ZSCAN, narrowed by a MATCH pattern when the filter has one."""
        where = where or Filter()
        seen = matched = 0
        for rows in self._zscan(where.pattern()):
            for member, score in rows:
                seen += 1
                entry = Entry(member, score, self.name)
                if where.matches(entry):
                    matched += 1
                    yield entry
                    if limit is not None and matched >= limit:
                        return
            if progress:
                progress(seen, matched)

    def _zscan(self, pattern: str | None) -> Iterator[list]:
        cursor = 0
        while True:
            cursor, rows = self.r.zscan(self.key, cursor, match=pattern, count=BATCH)
            if rows:
                yield rows
            if cursor == 0:
                return

    def find(self, jid: str) -> Entry | None:
        """The job with this jid (Sidekiq's find_job), or None."""
        return next(self.scan(Filter.of(jids=[jid]), limit=1), None)

    # --- a copy to count, then act on --------------------------------------------------------
    def snapshot(self, held: bool = False, where: Filter | None = None,
                 token: str | None = None) -> Snapshot:
        """A copy of the set (snapshot.py): ``with js.snapshot() as snap: n =
        js.count_in(snap, where); ...; js.delete_all(where, snapshot=snap)``. ``held``: kept
        for an action in another request (the dashboard's question), resumed by its token
        with the same ``where`` (the search it counts for)."""
        return Snapshot(self.r, self.keys, self.key, "zset", held=held, token=token,
                        bound=_bound(where))

    def resume(self, token: str, where: Filter | None = None) -> Snapshot:
        """The copy a question held for ``where`` (snapshot.Gone when it is not there any
        more, was answered already or counted another search)."""
        return Snapshot.resume(self.r, self.keys, token, "zset", self.key, _bound(where))

    def count_in(self, snap: Snapshot, where: Filter | None = None) -> int:
        """How many jobs of the copy match ``where``: the number a question asks with."""
        if not where:
            return snap.count
        return sum(1 for rows in snap.pages(BATCH) for member, score in rows
                   if where.matches(Entry(member, score, self.name)))

    # --- one job ---------------------------------------------------------------------------
    def retry(self, entry: Entry) -> bool:
        """Push it to its queue now (Sidekiq's add_to_queue/retry). False if it was gone;
        Unmovable (nothing done) when it has no queue to go to."""
        left = self._left("queue", entry)
        if left is not None:
            raise left
        return self._act("queue", [entry])[0] == 1

    def delete(self, entry: Entry) -> bool:
        return self._act("delete", [entry])[0] == 1

    def kill(self, entry: Entry) -> bool:
        """Move it to dead now (Sidekiq's kill), as it is."""
        if self.name == "dead":
            return False
        return self._act("dead", [entry])[0] == 1

    def reschedule(self, entry: Entry, at: float) -> bool:
        """Run it at ``at`` (epoch) instead: it stays in this set with a new score."""
        if self.name == "dead":
            raise ValueError("a dead job is not rescheduled; retry it, or kill it again later")
        return self._act("score", [entry], score=at)[0] == 1

    # --- every match -----------------------------------------------------------------------
    # (``snapshot``: act on the jobs of that copy, taken when a question counted them, not on
    # the set as it is now)
    def retry_all(self, where: Filter | None = None, progress: Progress | None = None,
                  snapshot: Snapshot | None = None, left: list | None = None) -> int:
        """Every match pushed to its queue now; how many. A match with nowhere to go stays
        where it is (Unmovable's cases), appended to ``left`` as an Unmovable when given."""
        return self._bulk("queue", where, progress, snapshot, left)

    def delete_all(self, where: Filter | None = None, progress: Progress | None = None,
                   snapshot: Snapshot | None = None) -> int:
        if not where and snapshot is None:
            return self.clear()
        return self._bulk("delete", where, progress, snapshot)

    def clear(self) -> int:
        """The whole set, in one step, as Sidekiq's clear does; the number it held. Its task
        jobs are told afterwards (a dead one is final there already), and its unique jobs'
        locks given up."""
        with Snapshot(self.r, self.keys, self.key, "zset", take=True) as snap:
            if self.name != "dead":  # (a dead job's unique lock went at its death)
                mark_taken(self.r, self.keys, snap, self.name, WHERE[self.name])
                release_taken(self.r, self.keys, snap)
        return snap.count

    def kill_all(self, where: Filter | None = None, progress: Progress | None = None,
                 snapshot: Snapshot | None = None) -> int:
        if self.name == "dead":
            return 0
        return self._bulk("dead", where, progress, snapshot)

    def _bulk(self, action: str, where: Filter | None, progress: Progress | None,
              snap: Snapshot | None = None, left: list | None = None) -> int:
        """Act on every match among the jobs present when it began, BATCH jobs per round
        trip; the number acted on. It walks a copy of the set taken in one step
        (snapshot.py): a job that enters the set meanwhile (a retried job failing back into
        it, a worker's new failure) is not in the copy, so it is never acted on, and each job
        of the copy is read once, so none is acted on twice."""
        if snap is None:
            with self.snapshot() as snap:
                return self._walk(action, where or Filter(), progress, snap, left)
        return self._walk(action, where or Filter(), progress, snap, left)

    def _walk(self, action: str, where: Filter, progress: Progress | None,
              snap: Snapshot, left: list | None) -> int:
        limits = self._limits() if action == "dead" else None
        done = examined = 0
        for rows in snap.pages(BATCH):
            examined += len(rows)
            batch = []
            for e in (Entry(m, s, self.name) for m, s in rows):
                if not where.matches(e):
                    continue
                stays = self._left(action, e)
                if stays is None:
                    batch.append(e)
                elif left is not None:
                    left.append(stays)
            if batch:
                done += self._act(action, batch, limits=limits)[0]
            if progress:
                progress(examined, done)
        if progress and not examined:
            progress(0, 0)
        return done

    def _left(self, action: str, entry: Entry) -> Unmovable | None:
        """Why an action leaves this member where it is, or None. A retry leaves a job whose
        payload names no queue (F4 #3: it went to "default"; Sidekiq 6.4 refuses it, and
        loses it); and, from Dead, what is not a job (not JSON, not UTF-8, not an object):
        pushed to its queue it came back to Dead as an "unusable payload" at once, counted as
        retried (red team RT4, finding 6); from Retries or Scheduled that one goes, so that
        the daemon sends it to Dead with that reason."""
        if action != "queue":
            return None
        if entry.msg is None:
            return Unmovable(entry, NOT_A_JOB, NOT_A_JOB) if self.name == "dead" else None
        if entry.destination is None:
            return Unmovable(entry, NO_QUEUE, no_queue(entry.msg))
        return None

    # --- the script ------------------------------------------------------------------------
    def _limits(self) -> DeadLimits:
        return deadlimits.resolve(self.r, self.keys, self.dead_limits)

    def _act(self, action: str, entries: Iterable[Entry], score: float = 0.0,
             limits: DeadLimits | None = None) -> list[int]:
        """One move.lua call for ``entries``: [acted on, left (destination of another type)].
        A kill trims dead to ``limits`` (else the bounds deadlimits.py finds now)."""
        now = time.time()
        keys = [self.key, self.keys.queues, self.keys.dead]
        if action == "dead" and limits is None:
            limits = self._limits()
        args: list = [action, repr(now), *(limits or deadlimits.SIDEKIQ).trim_args(now)]
        entries = list(entries)
        for entry in entries:
            data, queue = self._written(action, entry, now, score)
            # (bytes: a queue named in a job's JSON by a lone surrogate has a key too, names.py)
            keys.append(to_key(self.keys.queue(queue)) if action == "queue" else self.key)
            args += [entry.raw, data, to_key(queue)]
        done, left, tasks, uniques = MOVE(self.r, keys, args)
        # A job deleted from dead is final in its task already: its record keeps the error
        # it died with (taskmarks.py).
        if tasks and action in ("delete", "dead") and self.name != "dead":
            mark_removed(self.r, self.keys, [entries[i - 1] for i in tasks], action,
                         WHERE[self.name])
        if uniques and action in ("delete", "dead"):
            release_removed(self.r, self.keys, [entries[i - 1] for i in uniques])
        return [int(done), int(left)]

    def _written(self, action: str, entry: Entry, now: float, score: float):
        """(what move.lua writes for this job, its queue)."""
        if action == "score":
            return repr(float(score)), ""
        if action != "queue":
            return entry.raw, entry.queue
        return self._to_queue(entry, now), entry.destination

    def _to_queue(self, entry: Entry, now: float) -> bytes | str:
        """The payload a job goes back to its queue with. A scheduled job keeps its bytes
        (``enqueued_at`` added, as the scheduler does); a retried or dead one is re-encoded
        as Sidekiq does: ``retry_count`` one lower (its next failure counts the same attempt
        again), ``enqueued_at`` now; a dead one counts a kick."""
        msg = entry.msg
        if msg is None:
            return entry.raw  # not a job: back in its queue as it was, to be rejected again
        if self.name == "schedule" and "at" not in msg:
            return with_field(entry.raw, msg, "enqueued_at", now)
        msg = dict(msg)
        msg.pop("at", None)
        count = msg.get("retry_count")
        if isinstance(count, int) and not isinstance(count, bool) and self.name != "schedule":
            msg["retry_count"] = count - 1
        if self.name == "dead":
            kicks = msg.get(KICKS)
            msg[KICKS] = (kicks if isinstance(kicks, int) and not isinstance(kicks, bool)
                          else 0) + 1
        msg["enqueued_at"] = now
        return dumps(msg)


def _bound(where: Filter | None) -> str:
    return where.spelled() if where else ""


def act_together(action: str, sets: Sequence[JobSet], where: Filter | None = None,
                 snapshots: Sequence[Snapshot] | None = None) -> list[int]:
    """``retry``, ``delete`` or ``kill`` every match of several sets, acting on each job present
    in any of them when it began once at most: every set is copied in one step before any is
    acted on (red team RT1, finding 1: retry walked ``retry`` and then copied ``dead``, where
    the jobs it had just retried had died again, and retried them twice). ``snapshots``: the
    copies a question counted (held), one per set."""
    method = {"retry": "retry_all", "delete": "delete_all", "kill": "kill_all"}[action]
    if snapshots is not None:
        return [getattr(js, method)(where, snapshot=snap) for js, snap in zip(sets, snapshots)]
    with together([js.snapshot() for js in sets]) as snaps:
        return [getattr(js, method)(where, snapshot=snap) for js, snap in zip(sets, snaps)]
