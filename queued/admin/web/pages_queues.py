"""Queues: every queue's size, latency and pause (a page at a time: 1,000 queues are read in
one pipeline and shown a page at a time), pause/unpause/clear; a queue's jobs, next first,
each with Delete and Run next (issue 20), one at a time or the ticked rows.

A row names its job by its place when the page was made and a digest of its exact bytes
(``PLACE|DIGEST``): the job is looked for about there (Queue.locate), and the action removes
or moves exactly those bytes, so a job a worker took meanwhile is simply not found.

Clear asks with the number of jobs counted at the click (``/count/queue/NAME``) on a copy kept
for the answer, and deletes at most those (Queue.clear_counted; red team RT1, finding 7): jobs
pushed while the question was read stay."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..ctltext import name as ctl_name
from ..entries import Entry
from ..queues import Queue
from ..snapshot import Gone
from .filters import member_id, plural
from .paging import pager
from .render import act, counted_of, path_param, query_text, render, search_text, web_of

#: What each action on a queue's jobs does, and how its message says it.
JOB_ACTIONS = {"delete": ("delete", "deleted {}"),
               "run_next": ("run_next", "moved {} to the front")}


def queues(request: Request):
    web = web_of(request)
    find = search_text(query_text(request.query_params, "q"))
    summaries = web.admin.queue_summaries()
    if find:
        summaries = [q for q in summaries if find.lower() in q.name.lower()]
    page = pager(request, len(summaries))
    return render(request, "queues.html", {
        "queues": summaries[page.offset:page.offset + page.size], "pager": page,
        "q": ctl_name(find) if find else "",  # (as typed: search_text reads it back)
        "total_size": sum(q.size for q in summaries)})


def queue(request: Request):
    web = web_of(request)
    q = web.admin.queue(path_param(request, "name"))
    page = pager(request, q.size())
    return render(request, "queue.html", {
        "queue": q, "size": page.total, "latency": q.latency(), "paused": q.paused(),
        "jobs": q.page(page.offset, page.size), "pager": page})


async def queue_action(request: Request):
    name = path_param(request, "name")

    def work(web, form) -> str:
        q, shown = web.admin.queue(name), ctl_name(name)  # (as queuedctl shows it)
        action = form.get("action")
        one = str(form.get("one") or "")
        if one:  # a row's own button: "delete|PLACE|DIGEST"
            action, _, row = one.partition("|")
            if action in JOB_ACTIONS:
                return _on_jobs(q, action, [row])
        if action == "pause":
            return f"paused {shown}" if q.pause() else f"{shown} was paused already"
        if action == "unpause":
            return f"unpaused {shown}" if q.unpause() else f"{shown} was not paused"
        if action == "clear":
            return _clear(q, form)
        if action in JOB_ACTIONS:
            return _on_jobs(q, str(action), form.getlist("job"))
        return f"unknown action {action!r}"
    back = "queues" if request.query_params.get("from") == "queues" else "queue"
    return await act(request, work, back, **({} if back == "queues" else {"name": name}))


def _clear(q: Queue, form) -> str:
    """The jobs the question counted (its copy's token in the form), else every job now."""
    if not form.get("snapshot"):
        return f"cleared {ctl_name(q.name)}: {plural(q.clear(), 'job')} deleted"
    try:
        snap = q.resume(str(form.get("snapshot")))
    except Gone as e:
        return f"nothing done: {e}; ask again"
    with snap:
        n = q.clear_counted(snap)
    return (f"cleared {ctl_name(q.name)}: {plural(n, 'job')} deleted of the "
            f"{counted_of(form)} counted when asked (jobs pushed since stay)")


def queue_count(request: Request):
    """``{"count", "token"}``: the jobs of the queue now, in a copy kept for the answer of the
    question that asked (Clear)."""
    web_of(request).csrf.header(request)
    q = web_of(request).admin.queue(path_param(request, "name"))
    with q.snapshot(held=True) as snap:
        pass
    return JSONResponse({"count": snap.count, "size": snap.count, "token": snap.token},
                        headers={"cache-control": "no-store"})


def _on_jobs(q: Queue, action: str, rows: list) -> str:
    method, past = JOB_ACTIONS[action]
    done = gone = 0
    # Moved one by one, each to the front: the last moved runs first, so the ticked rows go
    # in reverse to keep their order among themselves.
    for row in (reversed(rows) if action == "run_next" else rows):
        entry = _locate(q, str(row))
        if entry is not None and getattr(q, method)(entry):
            done += 1
        else:
            gone += 1
    return past.format(plural(done, "job")) + (f"; {gone} no longer there" if gone else "")


def _locate(q: Queue, row: str) -> Entry | None:
    place, _, digest = row.partition("|")
    try:
        hint = max(int(place), 0)
    except ValueError:
        hint = 0
    return q.locate(lambda raw: member_id(raw) == digest, hint)


routes = [Route("/queues", queues, name="queues"),
          Route("/count/queue/{name:queued_name}", queue_count, name="queue_count"),
          Route("/queues/{name:queued_name}", queue, name="queue"),
          Route("/queues/{name:queued_name}", queue_action, methods=["POST"], name="queue_action")]
