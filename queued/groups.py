"""Queue groups: some queues served by worker processes of their own shape (Sidekiq 7's capsules).

    groups:
      cpu: {queues: [reports], concurrency: 2, threads: 1}
      io:
        queues: [mailers, [webhooks, 2]]
        concurrency: 2
        threads: 25

Each group has its own queues (names, or ``[name, weight]`` pairs as at the top level: strict
order unless a weight is given), its own ``concurrency`` (worker processes, default 1) and
``threads`` (jobs each runs at once, default 1). Queues outside every group are served by the
top-level ``queues``/``concurrency``/``threads``, as before groups existed. So CPU-bound jobs
get processes of one thread each while I/O-bound ones share few processes of many threads:
one GIL is never shared by a 3-second report and 24 mail jobs (Sidekiq #3118: a 3 s job took
30 s beside 24 busy threads). A queue belongs to one group only.

Where Sidekiq's capsule ``concurrency`` counts threads, a group's counts processes, as the
top-level ``concurrency`` does (docs/migrating.md). This module parses and describes groups;
the master forks each group's workers (children.py).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from .redisopts import _subkeys
from .values import Invalid, expected, integer, queues as parse_queues, word

_KEYS = {"queues": parse_queues, "concurrency": integer(1), "threads": integer(1)}


@dataclasses.dataclass(frozen=True)
class Group:
    """One shape of worker processes and the queues they serve. ``name`` is "" for the
    top-level queues."""
    name: str
    queues: tuple[tuple[str, int], ...]
    strict: bool
    concurrency: int
    threads: int

    @property
    def queue_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.queues)

    @property
    def weighted_queues(self) -> tuple[str, ...]:
        """Sidekiq's expansion: each name repeated max(weight, 1) times, for random choice."""
        return tuple(name for name, weight in self.queues for _ in range(max(weight, 1)))

    @property
    def label(self) -> str:
        return f"group {self.name}" if self.name else "top level"

    def shape(self) -> str:
        """``2 processes x 25 threads = 50 jobs at once``."""
        c, t = self.concurrency, self.threads
        return (f"{c} process{'es' if c != 1 else ''} x {t} thread{'s' if t != 1 else ''} = "
                f"{c * t} job{'s' if c * t != 1 else ''} at once")


def with_weights(spec) -> tuple[tuple[tuple[str, int], ...], bool]:
    """(queues with weights, strict) from a parsed queue list: Sidekiq's rule, strict unless
    some queue has an explicit weight > 0."""
    strict = not any(weight for _, weight in spec)
    return tuple((name, 1 if weight is None else weight) for name, weight in spec), strict


def parse_groups(value: Any) -> tuple[Group, ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise expected("a mapping of group name -> {queues, concurrency, threads}", value)
    out = []
    for raw, spec in value.items():
        try:
            name = word(raw[1:] if isinstance(raw, str) and raw.startswith(":") else raw)
        except Invalid as exc:
            raise Invalid(f"a group name: {exc}") from None
        try:
            out.append(_group(name, spec))
        except Invalid as exc:
            raise exc.within(name) from None
    return tuple(out)


def _group(name: str, spec: Any) -> Group:
    given = _subkeys(spec, _KEYS, "a mapping with queues, concurrency, threads")
    values = {}
    for key, item in given.items():
        try:
            values[key] = _KEYS[key](item)
        except Invalid as exc:
            raise exc.within(key) from None
    if not values.get("queues"):
        raise Invalid("a group needs its queues (a list of names or [name, weight])", "queues")
    queues, strict = with_weights(values["queues"])
    return Group(name, queues, strict, values.get("concurrency", 1), values.get("threads", 1))


def check(top_level, explicit: bool, groups: tuple[Group, ...]):
    """The top-level queues once groups took theirs (a queue in two groups, or in a group and
    the top-level ``queues`` given in the file, is an Invalid naming it). Unless given, the
    top-level queues lose the ones a group serves (``default``, when none is listed)."""
    owner: dict[str, str] = {}
    for g in groups:
        for q in g.queue_names:
            if q in owner:
                raise Invalid(f"queue '{q}' is in groups {owner[q]} and {g.name}; a queue "
                              f"belongs to one group", f"{g.name}.queues")
            owner[q] = g.name
    if explicit:
        for name, _ in top_level:
            if name in owner:
                raise Invalid(f"queue '{name}' is in the top-level queues and in group "
                              f"{owner[name]}; a queue belongs to one group",
                              f"{owner[name]}.queues")
        return top_level
    return tuple(q for q in top_level if q[0] not in owner)


def shape_lines(config) -> list[str]:
    """What the master says at start about its shape: processes x threads (each group's, and
    the total), and a hint when many processes would serve better as threads (a process per
    job costs memory; jobs that wait need no core of their own)."""
    groups = config.worker_groups
    if len(groups) == 1 and not groups[0].name:
        lines = [groups[0].shape()]
    else:
        lines = [f"{g.label} ({', '.join(g.queue_names)}): {g.shape()}" for g in groups]
        lines.append(f"{config.jobs_at_once} jobs at once in {config.process_count} processes")
    cores = os.cpu_count() or 1
    for g in groups:
        if g.threads == 1 and g.concurrency > 2 * cores:
            lines.append(f"{g.label}: concurrency {g.concurrency} is far above this host's "
                         f"{cores} cores: each job at once costs a whole process; for jobs "
                         f"that wait (HTTP, databases, mail) try concurrency {cores} with "
                         f"threads {max(2, -(-g.concurrency // cores))} (docs/migrating.md)")
    return lines
