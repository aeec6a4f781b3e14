"""The three modes and the switch between them. A mode is what ``queued.client.testing`` holds
(None for ``disable``): the client hands it every push's encoded payloads (``send``) and a
task its reads and writes (``task_*``, kept by tasks.py), so neither touches Redis.
"""
from __future__ import annotations

import json
from typing import Any

from .. import client as _client
from . import run, store, tasks


class _Mode:
    name = ""

    def send(self, client: Any, queued: dict[str, list[str]],
             scheduled: dict[str, float]) -> None:
        raise NotImplementedError

    # a task's Redis side, in memory (task.py calls these)
    def task_meta(self, task_id: str) -> dict[str, str]:
        return tasks.meta(task_id)

    def write_task(self, task: Any, buffer: Any) -> None:
        tasks.write(task, buffer, self)

    def seal_task(self, task_id: str, total: int | None) -> None:
        tasks.seal(task_id, total, self)

    def task_progress(self, task_id: str) -> dict:
        return tasks.progress(task_id)

    def task_page(self, task_id: str, state: str, cursor: int, count: int):
        return tasks.page(task_id, state)

    def task_job(self, task_id: str, jid: str) -> dict | None:
        return tasks.job(task_id, jid)

    def task_ids(self, limit: int) -> list[str]:
        return tasks.ids(limit)

    def __repr__(self) -> str:
        return f"<queued.testing {self.name} mode>"


def _decoded(queued: dict[str, list[str]], scheduled: dict[str, float]) -> list[dict]:
    """The payloads as a worker would read them back (JSON both ways, as through Redis), in
    push order; a scheduled one with its time as ``"at"``."""
    jobs = [json.loads(text) for texts in queued.values() for text in texts]
    for text, at in scheduled.items():
        msg = json.loads(text)
        msg["at"] = at
        jobs.append(msg)
    return jobs


class Fake(_Mode):
    """Pushes land in one list per job class (``HardWorker.jobs``)."""
    name = "fake"

    def send(self, client: Any, queued: dict[str, list[str]],
             scheduled: dict[str, float]) -> None:
        for msg in _decoded(queued, scheduled):
            store.add(msg)


class Inline(_Mode):
    """Pushes run at once, here, each through its JSON payload (scheduled ones too). Every job
    of one send runs (a bulk push, a task's block) even when one raises, as each would in a
    worker: then the first error is raised (a task is sealed first, so its callbacks run:
    task.py), and the others are logged."""
    name = "inline"

    def send(self, client: Any, queued: dict[str, list[str]],
             scheduled: dict[str, float]) -> None:
        first: Exception | None = None
        for msg in _decoded(queued, scheduled):
            msg.pop("at", None)
            try:
                run.perform(msg)
            except Exception as e:  # noqa: BLE001 - raised below, once the others ran
                if first is None:
                    first = e
                else:
                    run.log.error("inline job %s (jid %s) raised too: %s: %s", msg["class"],
                                  msg.get("jid"), type(e).__name__, e)
        if first is not None:
            raise first


FAKE, INLINE = Fake(), Inline()


class _Switch:
    """What fake(), inline() and disable() return: the mode is in force already; as a
    ``with`` block it puts back, at the block's end, the mode that was in force before."""

    def __init__(self, previous: _Mode | None):
        self.previous = previous

    def __enter__(self) -> "_Switch":
        return self

    def __exit__(self, *exc: Any) -> None:
        _client.testing = self.previous


def _switch(new: _Mode | None) -> _Switch:
    previous, _client.testing = _client.testing, new
    return _Switch(previous)


def fake() -> _Switch:
    """Pushes go to in-memory lists (``HardWorker.jobs``), for the whole process."""
    return _switch(FAKE)


def inline() -> _Switch:
    """Pushes run their job at once, in the pushing thread."""
    return _switch(INLINE)


def disable() -> _Switch:
    """Pushes go to Redis, as outside tests."""
    return _switch(None)


def mode() -> str:
    """``"fake"``, ``"inline"`` or ``"disable"``."""
    return _client.testing.name if _client.testing is not None else "disable"
