"""The ends of jobs of a task that succeeded, gathered as acks are and written per batch.

A job outside a task ends with an ack that rides with its worker's next reserve call (fetch.py).
A job of a task also moves to ``finished`` in its task, and the task may complete: that took a
script call per job (fail.lua's ``done``, with the completion check), and a task's no-op job
cost three times a plain one (issue 18). So a worker gathers the successes of each task here
and writes them with one finish.lua call per task when it writes its acks: with its next
reserve call (in the same write, just before it), before a job that may run long, before it
waits, before it exits. A job of a task is a job like another until then: reserved, and run
again if its worker dies first (at-least-once; its task counts stay exact: a job runs again
by moving between the task's sets).

What finish.lua answers, and what is done then:
- the jids it found no record of (a job another language's producer pushed with only the
  task's id, never marked working): their records are written, as a working mark would have;
- a refusal (the task would complete with a callback's queue key of another type): each job
  ends as before, with fail.lua, which tells whether its end completes the task and holds it
  if so (outcomes.py, sentahead.py).

Does not own the connection (sentahead.py) nor the scripts' Redis side (finish.lua, task.lua).
"""
from __future__ import annotations

from typing import NamedTuple

from .. import tracking
from ..keys import Keys


class Item(NamedTuple):
    member: bytes   # the reservation (reserved.Reservation.member)
    jid: str
    msg: dict       # the job, for its record if its task has none
    queue: str


class Call(NamedTuple):
    """One finish.lua call: a task's pending successes."""
    keys: list
    args: list
    items: tuple[Item, ...]


class Finishes:
    def __init__(self, keys: Keys, reserved_key: str):
        self.keys = keys
        self.reserved_key = reserved_key
        self.pending: dict[str, list[Item]] = {}  # task id -> its jobs that succeeded

    def add(self, member: bytes, move: tracking.Move, msg: dict, queue: str) -> None:
        self.pending.setdefault(move.task_id, []).append(Item(member, move.jid, msg, queue))

    def take(self) -> list[Call]:
        """The calls that write what is pending (and nothing is pending after)."""
        pending, self.pending = self.pending, {}
        calls = []
        for task_id, items in pending.items():
            args = [task_id, self.keys.ns]
            for item in items:
                args += [item.member, item.jid]
            calls.append(Call([self.reserved_key, self.keys.queues,
                               *self.keys.task_keys(task_id)], args, tuple(items)))
        return calls

    def task_id(self, call: Call) -> str:
        return call.args[0]

    def records(self, call: Call, jids: list[bytes]) -> list[tuple[list, list]]:
        """TASK_MARK calls (keys, args) that write the records of the jobs finish.lua named:
        their move to finished again (a no-op), with the record a working mark writes."""
        wanted = {j.decode() if isinstance(j, bytes) else j for j in jids}
        task_id = self.task_id(call)
        return [tracking.mark_call(self.keys, tracking.Move(task_id, item.jid, "finished"),
                                   tracking.record_json(item.msg, item.queue))
                for item in call.items if item.jid in wanted]
