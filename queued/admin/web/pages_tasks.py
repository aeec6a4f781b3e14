"""Tasks: the newest tasks with a progress bar and their counts per state; a task's page with
its jobs by state (failures and errors first), their errors and messages, a page at a time
(SSCAN cursor: a state may hold a million jids)."""
from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Route

from ...keys import TASK_STATES
from ...task import Task
from ..tasksummary import summary
from .paging import PAGE_SIZE, int_param, pager
from .render import path_param, render, web_of

TASKS_PER_PAGE = 25


def tasks(request: Request):
    web = web_of(request)
    page = pager(request, int(web.r.zcard(web.keys.tasks)), TASKS_PER_PAGE)
    ids = [i.decode() for i in web.r.zrevrange(web.keys.tasks, page.offset,
                                               page.offset + page.size - 1)]
    found = [Task.find(i, web.client) for i in ids]
    rows = []
    for t in found:
        if t is not None:
            info = t.info()
            rows.append((t, info, summary(t, info)))
    return render(request, "tasks.html", {"rows": rows, "pager": page})


def task(request: Request):
    web = web_of(request)
    t = Task.find(path_param(request, "tid"), web.client)
    if t is None:
        raise HTTPException(404, "no such task (never made, or expired)")
    info = t.info()
    progress = summary(t, info)  # (the numbers queuedctl task shows: tasksummary.py)
    state = request.query_params.get("state") or _first_state(progress)
    if state not in TASK_STATES:
        raise HTTPException(404, f"no state {state!r}: one of {', '.join(TASK_STATES)}")
    cursor = int_param(request, "cursor", 0, 0, 2**64)
    records, next_cursor = t.page(state, cursor, PAGE_SIZE)
    counts = {"enqueued": progress["enqueued"], "working": progress["working"],
              "finished": progress["finished"], "failed": progress["failed"],
              "retry": progress["retrying"], "error": progress["error"]}
    return render(request, "task.html", {"task": t, "info": info, "progress": progress,
                                         "state": state, "counts": counts, "records": records,
                                         "next_cursor": next_cursor, "cursor": cursor})


def _first_state(p: dict) -> str:
    """What to show first: what went wrong, if anything did."""
    if p["failed"]:
        return "failed"
    if p["error"]:
        return "error"
    if p["retrying"]:
        return "retry"
    return "finished" if p["finished"] else "enqueued"


routes = [Route("/tasks", tasks, name="tasks"),
          Route("/tasks/{tid:queued_name}", task, name="task")]
