"""A task's numbers as every tool shows them: ``queuedctl task``/``tasks``, the dashboard's task
list and task page all call ``summary`` (issue 20: they disagreed, "Error 9 | Retrying 9",
"9 (9 retrying)", "retry 9 / error 0", 100 % beside 99 %).

The counts are disjoint and add up to the total: enqueued, working, finished, failed (a
business failure, final), retrying (an error waiting for its retry) and error (a final
error: the job died or was removed). ``final`` is finished + failed + error; ``percent`` is
final / total rounded down, so 100 % means every job is final, never "almost"; the total is
the jobs the task holds, or the total announced by ``seal(total)`` when more are to come.

For ``task --watch``: ``Pace`` (jobs made final per second and the time left at that pace)
and ``next_retry`` (when the soonest of the errors holding the task open runs again).
"""
from __future__ import annotations

import time
from collections import deque

from ..errors import PayloadError
from ..payload import loads
from ..task import Task, state_word
from ..tracking import task_id_of

#: The window ``Pace`` measures over (seconds): long enough to smooth a burst, short enough
#: to follow a change of pace.
PACE_WINDOW = 60.0
#: Retry-set members Redis examines per ZSCAN call in ``next_retry``.
SCAN_COUNT = 5_000


def summary(task: Task, info: dict | None = None, progress: dict | None = None) -> dict:
    """The task's numbers (``info``/``progress``: Task.info() and Task.progress() when the
    caller has them already)."""
    info = task.info() if info is None else info
    p = task.progress() if progress is None else progress
    error = p["error"] - p["retrying"]
    final = p["finished"] + p["failed"] + error
    total = max(p["total"], info.get("expected") or 0)
    return {"total": total, "enqueued": p["enqueued"], "working": p["working"],
            "finished": p["finished"], "failed": p["failed"], "retrying": p["retrying"],
            "error": error, "final": final,
            "percent": final * 100 // total if total else (100 if p["complete"] else 0),
            "state": state_word(info, p), "complete": p["complete"], "success": p["success"],
            "sealed": p["sealed"]}


class Pace:
    """Jobs made final per second over the last PACE_WINDOW seconds, from the summaries a
    watcher takes, and the seconds left at that pace."""

    def __init__(self, window: float = PACE_WINDOW):
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, final: int, at: float | None = None) -> None:
        at = time.monotonic() if at is None else at
        self.samples.append((at, final))
        while len(self.samples) > 2 and at - self.samples[1][0] >= self.window:
            self.samples.popleft()

    def rate(self) -> float | None:
        """Jobs per second, or None before two samples a moment apart."""
        if len(self.samples) < 2:
            return None
        (t0, f0), (t1, f1) = self.samples[0], self.samples[-1]
        return (f1 - f0) / (t1 - t0) if t1 - t0 >= 0.5 else None

    def eta(self, remaining: int) -> float | None:
        """Seconds until ``remaining`` more jobs are final at this pace (None: no pace yet,
        or nothing moves)."""
        rate = self.rate()
        if remaining <= 0:
            return 0.0
        return remaining / rate if rate else None


def next_retry(task: Task) -> float | None:
    """When the soonest retry of the task's errors is due (epoch), None if none waits: one
    ZSCAN of the retry set narrowed to members naming the task's id, each checked by its
    parsed task_id."""
    r, key = task.client.redis, task.keys.retry
    pattern = "*" + "".join("\\" + c if c in "*?[]\\" else c for c in task.id) + "*"
    soonest, cursor = None, 0
    while True:
        cursor, rows = r.zscan(key, cursor, match=pattern, count=SCAN_COUNT)
        for member, score in rows:
            if soonest is not None and score >= soonest:
                continue
            try:
                msg = loads(member)
            except PayloadError:
                continue
            if task_id_of(msg) == task.id:
                soonest = score
        if cursor == 0:
            return soonest
