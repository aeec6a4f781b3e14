"""What is failing: the retry or dead set grouped by (job class, error class), with how many jobs
each group holds and its latest failure (message and time), largest group first. The answer
``queuedctl errors`` prints (DESIGN.md "On-call commands") and the dashboard can show.

One ZSCAN pass over the set, each member parsed once, nothing kept per job: memory grows with
the number of groups, not of jobs. The class is the one Sidekiq's Web UI shows (ActiveJob's
wrapped class, a display_class), so Rails jobs group under their own names, not JobWrapper.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from ..payload import job_class_name, json_object, to_epoch
from .entries import text_of
from .jobsets import JobSet

#: Jobs Redis returns per ZSCAN call (fewer round trips than the bulk actions' 500: nothing is
#: written between two calls here).
SCAN_COUNT = 2000

Progress = Callable[[int], None]  # jobs examined so far


@dataclass
class ErrorGroup:
    klass: str
    error_class: str
    count: int
    latest_message: str
    latest_at: float | None

    def as_dict(self) -> dict:
        """DESIGN.md's shape: class, error_class, count, latest_message, latest_at."""
        return {"class": self.klass, "error_class": self.error_class, "count": self.count,
                "latest_message": self.latest_message, "latest_at": self.latest_at}


def error_groups(jobset: JobSet, progress: Progress | None = None) -> list[ErrorGroup]:
    """Every (class, error class) of ``jobset`` (retry or dead): largest first, then the most
    recent failure first. A member that is not a JSON object is counted under class ``?``."""
    groups: dict[tuple[str, str], ErrorGroup] = {}
    examined = 0
    for rows in _zscan(jobset):
        for member, score in rows:
            klass, error_class, message, at = _failure(member, score, jobset.name)
            group = groups.get((klass, error_class))
            if group is None:
                groups[(klass, error_class)] = ErrorGroup(klass, error_class, 1, message, at)
                continue
            group.count += 1
            if at is not None and (group.latest_at is None or at > group.latest_at):
                group.latest_at, group.latest_message = at, message
        examined += len(rows)
        if progress:
            progress(examined)
    return sorted(groups.values(), key=lambda g: (-g.count, -(g.latest_at or 0.0), g.klass))


def _zscan(jobset: JobSet) -> Iterator[list]:
    cursor = 0
    while True:
        cursor, rows = jobset.r.zscan(jobset.key, cursor, count=SCAN_COUNT)
        if rows:
            yield rows
        if cursor == 0:
            return


def _failure(member: bytes, score: float,
             set_name: str) -> tuple[str, str, str, float | None]:
    """(class shown, error class, error message, when it last failed) of one member. The
    time is the payload's last failure (``retried_at``, else ``failed_at``): a retry's score
    is when it runs next, not when it failed; a dead job's score (when it died) stands in
    for a payload without either."""
    msg = json_object(member)
    if msg is None:
        return "?", "", "", score if set_name == "dead" else None
    at = to_epoch(msg.get("retried_at")) or to_epoch(msg.get("failed_at"))
    if at is None and set_name == "dead":
        at = score
    return (job_class_name(msg), text_of(msg.get("error_class")),
            text_of(msg.get("error_message")), at)
