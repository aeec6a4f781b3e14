"""Limits: every rate limiter (queued.Limiter) with its size, its use now and its counts, and
the unique jobs' locks, each releasable (issue 21). Limiters are read in two pipelines however
many are shown (SHOWN at most, most recently used); locks by SCAN, a page's worth."""
from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from ..limits import is_seconds
from .filters import visible
from .render import act, form_text, pager, render, templates, web_of

# ``is seconds``: a definition's span the duration filter can show (admin/limits.py)
templates.env.tests["seconds"] = is_seconds

#: Locks read for one page view (they are found with SCAN: there is no index of them).
LOCKS_SHOWN = 500
LIMITERS_PER_PAGE = 100


def limits(request: Request):
    web = web_of(request)
    found = web.admin.limits.all()
    page = pager(request, len(found), LIMITERS_PER_PAGE)
    return render(request, "limits.html", {
        "limiters": found[page.offset:page.offset + page.size], "pager": page,
        "counters": web.admin.counters()})


def locks(request: Request):
    web = web_of(request)
    found = web.admin.locks.scan(limit=LOCKS_SHOWN)
    return render(request, "locks.html", {"locks": found, "cut": len(found) == LOCKS_SHOWN})


async def locks_action(request: Request):
    def work(web, form) -> str:
        digest = form_text(form, "digest")  # (a name that is not UTF-8 comes as digest~)
        if form.get("action") == "release_all":
            return f"gave up {web.admin.locks.release_all()} locks"
        if form.get("action") == "release" and digest:
            if web.admin.locks.release(digest):
                return f"gave up the lock {visible(digest)}"
            return f"no lock {visible(digest)} (expired, or released already)"
        return "nothing done"
    return await act(request, work, "locks")


routes = [Route("/limits", limits, name="limits"), Route("/locks", locks, name="locks"),
          Route("/locks", locks_action, methods=["POST"], name="locks_action")]
