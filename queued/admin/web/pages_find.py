"""Find: where a job is now, by its jid (admin/find.py, what ``queuedctl find`` prints): waiting
in a queue (at which place), scheduled, in Retries or Dead, running (on which process, pid and
worker), fetched, and its task's record; each place a link to its page. Every jid the
dashboard shows where it has no page of its own (a queue's job, a running job, a task's job, a
callback) links here (issue 20)."""
from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from ..find import locate
from .paging import PAGE_SIZE
from .render import query_text, render, search_text, web_of

#: A place's set, by the URL of its page.
SLUGS = {"schedule": "scheduled", "retry": "retries", "dead": "dead"}


def find(request: Request):
    web = web_of(request)
    jid = search_text(query_text(request.query_params, "jid"))
    places = locate(web.admin, jid) if jid else []
    job = next((p.entry for p in places if p.entry is not None and p.entry.msg), None)
    return render(request, "find.html", {"jid": jid, "places": places, "job": job,
                                         "slugs": SLUGS, "per_page": PAGE_SIZE})


routes = [Route("/find", find, name="find")]
