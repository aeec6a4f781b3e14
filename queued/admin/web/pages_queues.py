"""Queues: every queue's size, latency and pause (a page at a time: 1,000 queues are read in
one pipeline and shown 100 per page), pause/unpause/clear; a queue's jobs, next first."""
from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from .render import PAGE_SIZE, act, pager, path_param, render, web_of

QUEUES_PER_PAGE = 100


def queues(request: Request):
    web = web_of(request)
    find = request.query_params.get("q", "").strip()
    summaries = web.admin.queue_summaries()
    if find:
        summaries = [q for q in summaries if find.lower() in q.name.lower()]
    page = pager(request, len(summaries), QUEUES_PER_PAGE)
    return render(request, "queues.html", {
        "queues": summaries[page.offset:page.offset + page.size], "pager": page, "q": find,
        "total_size": sum(q.size for q in summaries)})


def queue(request: Request):
    web = web_of(request)
    q = web.admin.queue(path_param(request, "name"))
    page = pager(request, q.size(), PAGE_SIZE)
    return render(request, "queue.html", {
        "queue": q, "size": page.total, "latency": q.latency(), "paused": q.paused(),
        "jobs": q.page(page.offset, page.size), "pager": page})


async def queue_action(request: Request):
    name = path_param(request, "name")

    def work(web, form) -> str:
        q = web.admin.queue(name)
        action = form.get("action")
        if action == "pause":
            return f"paused {name}" if q.pause() else f"{name} was paused already"
        if action == "unpause":
            return f"unpaused {name}" if q.unpause() else f"{name} was not paused"
        if action == "clear":
            return f"cleared {name}: {q.clear()} jobs deleted"
        return f"unknown action {action!r}"
    back = "queues" if request.query_params.get("from") == "queues" else "queue"
    return await act(request, work, back, **({} if back == "queues" else {"name": name}))


routes = [Route("/queues", queues, name="queues"),
          Route("/queues/{name:queued_name}", queue, name="queue"),
          Route("/queues/{name:queued_name}", queue_action, methods=["POST"], name="queue_action")]
