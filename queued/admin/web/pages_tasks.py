"""Tasks: the newest tasks with a progress bar and their counts per state; a task's page with
its progress, completion, callbacks, and its jobs by state (failures and errors first) with
their errors and ``say()`` messages, a page at a time (SSCAN cursor: a state may hold a million
jids); Retry its errors now, Delete it (admin/taskadmin.py). Every number is the one
``queuedctl task`` shows (admin/tasksummary.py: issue 20), but the question of Retry its
errors now, which counts at the click what can be retried: the task's jobs in copies of
Retries and Dead that the action then walks (``/count/task/ID``; red team RT1, findings 1
and 10)."""
from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ...keys import TASK_STATES
from ...task import Task
from ..names import name_of
from ..snapshot import Gone
from ..taskadmin import callbacks, count as count_errors, delete_task, retry_errors
from ..tasksummary import summary
from .filters import plural
from .paging import CURSOR_MAX, int_param, page_size, pager
from .render import act, path_param, render, web_of


def tasks(request: Request):
    web = web_of(request)
    page = pager(request, int(web.r.zcard(web.keys.tasks)))
    ids = [name_of(i) for i in web.r.zrevrange(web.keys.tasks, page.offset,
                                               page.offset + page.size - 1)]
    rows = []
    for t in (Task.find(task_id, web.client) for task_id in ids):
        if t is not None:
            info = t.info()
            rows.append((t, info, summary(t, info)))
    return render(request, "tasks.html", {"rows": rows, "pager": page})


def _task(request: Request) -> Task:
    web = web_of(request)
    t = Task.find(path_param(request, "tid"), web.client)
    if t is None:
        raise HTTPException(404, "no such task (never made, expired or deleted)")
    return t


def task(request: Request):
    t = _task(request)
    info = t.info()
    progress = summary(t, info)  # (the numbers queuedctl task shows: tasksummary.py)
    state = request.query_params.get("state") or _first_state(progress)
    if state not in TASK_STATES:
        raise HTTPException(404, f"no state {state!r}: one of {', '.join(TASK_STATES)}")
    cursor = int_param(request, "cursor", 0, 0, CURSOR_MAX)
    size = page_size(request)
    records, next_cursor = t.page(state, cursor, size)
    counts = {"enqueued": progress["enqueued"], "working": progress["working"],
              "finished": progress["finished"], "failed": progress["failed"],
              "retry": progress["retrying"], "error": progress["error"]}
    return render(request, "task.html", {
        "task": t, "info": info, "progress": progress, "state": state, "counts": counts,
        "records": records, "next_cursor": next_cursor, "cursor": cursor, "size": size,
        "callbacks": callbacks(t)})


async def task_action(request: Request):
    t = _task(request)

    def work(web, form) -> str:
        action = form.get("action")
        if action == "retry_errors":
            token = str(form.get("snapshot") or "") or None
            try:
                waiting, dead = retry_errors(web.admin, t, token)
            except Gone as e:
                return f"nothing done: {e}; ask again"
            return (f"retried {plural(waiting + dead, 'job')} of task {t.id} now "
                    f"({waiting:,} from Retries, {dead:,} from Dead)")
        if action == "delete":
            if not delete_task(t):
                return f"task {t.id} was gone already"
            return (f"deleted task {t.id}: its jobs still waiting run outside any task, and "
                    "no callback is pushed")
        return f"unknown action {action!r}"
    if request.query_params.get("then") == "tasks":
        return await act(request, work, "tasks")
    return await act(request, work, "task", tid=t.id)


def task_count(request: Request):
    """``{"count", "retry", "dead", "token"}``: what Retry its errors now would retry, counted
    in copies kept for the answer (taskadmin.count)."""
    web_of(request).csrf.header(request)
    return JSONResponse(count_errors(web_of(request).admin, _task(request)),
                        headers={"cache-control": "no-store"})


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
          Route("/count/task/{tid:queued_name}", task_count, name="task_count"),
          Route("/tasks/{tid:queued_name}", task, name="task"),
          Route("/tasks/{tid:queued_name}", task_action, methods=["POST"], name="task_action")]
