"""A small read-only JSON API over tasks, as a WSGI callable: what seed 000's front end polls
("how is my promotion's registration going, which products failed and why"). Mount it in any
WSGI server or site (gunicorn, uwsgi, Django/Flask via a dispatcher, or the dashboard):

    from queued.admin.taskapi import TaskAPI
    application = TaskAPI()                  # the default client (REDIS_URL)

    GET /tasks                        the newest tasks: [{id, description, ..., progress}]
    GET /tasks/<id>                   {id, description, created_at, sealed, expected,
                                       completed_at, succeeded_at, state, progress}
    GET /tasks/<id>/jobs?state=failed&cursor=0&count=50
                                      {"jobs": [records], "cursor": next or 0}
                                      state: enqueued, working, finished, failed, retry
                                      (errors waiting for a retry), error (final errors)

Only GET (and HEAD); nothing here writes. Put it behind the same authentication as the rest
of the site: a task's records hold its jobs' arguments.
"""
from __future__ import annotations

import json
import re
from typing import Callable, Iterable
from urllib.parse import parse_qs

from .. import client as client_mod
from ..keys import TASK_STATES
from ..task import Task, recent, state_word as state

MAX_COUNT = 500
_TASK = re.compile(r"^/tasks/([^/]+)(/jobs)?/?$")


class TaskAPI:
    """The WSGI application. ``client``: a queued.Client (default: queued's default)."""

    def __init__(self, client: client_mod.Client | None = None):
        self._client = client

    @property
    def client(self) -> client_mod.Client:
        return self._client or client_mod.default_client()

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            return _reply(start_response, 405, {"error": "read-only: GET only"},
                          [("Allow", "GET, HEAD")])
        path = environ.get("PATH_INFO", "") or "/"
        query = parse_qs(environ.get("QUERY_STRING", ""))
        try:
            status, body = self._route(path, query)
        except ValueError as e:
            status, body = 400, {"error": str(e)}
        return _reply(start_response, status, body, head=method == "HEAD")

    def _route(self, path: str, query: dict) -> tuple[int, object]:
        if path.rstrip("/") == "/tasks":
            limit = _number(query, "limit", 50, 1, 1000)
            return 200, [_summary(t) for t in recent(self.client, limit)]
        found = _TASK.match(path)
        if not found:
            return 404, {"error": f"no such path: {path}"}
        task = Task.find(found.group(1), self.client)
        if task is None:
            return 404, {"error": f"no task {found.group(1)} (never made, or expired)"}
        if not found.group(2):
            return 200, _summary(task)
        wanted = (query.get("state") or ["failed"])[0]
        if wanted not in TASK_STATES:
            raise ValueError(f"state must be one of {', '.join(TASK_STATES)}, not {wanted!r}")
        jobs, cursor = task.page(wanted, _number(query, "cursor", 0, 0, None),
                                 _number(query, "count", 50, 1, MAX_COUNT))
        return 200, {"jobs": jobs, "cursor": cursor}


def _summary(task: Task) -> dict:
    info, progress = task.info(), task.progress()
    return {**info, "state": state(info, progress), "progress": progress}


def _number(query: dict, name: str, default: int, low: int, high: int | None) -> int:
    text = (query.get(name) or [str(default)])[0]
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {text!r}") from None
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} must be between {low} and {high or 'any'}, not {value}")
    return value


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _reply(start_response: Callable, status: int, body: object,
           headers: list | None = None, head: bool = False) -> list[bytes]:
    data = json.dumps(body, ensure_ascii=False).encode()
    start_response(f"{status} {_REASONS[status]}", [
        ("Content-Type", "application/json; charset=utf-8"),
        ("Content-Length", str(len(data))), ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"), *(headers or [])])
    return [] if head else [data]
