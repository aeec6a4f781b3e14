"""Scheduled, Retries and Dead: a page of a sorted set at a time (ZRANGE by index: 100,000 dead
jobs cost what 25 do), a search by class/queue/error/args that reads the set in bounded ZSCAN
steps (a page of matches, or SCAN_BUDGET jobs examined, then a "more" link carrying the
cursor) and counts its matches in a request of its own (``/SET/count``: the page is shown
before the whole set is read, and the confirmation of a bulk action asks with the number at
the moment of the click), actions on one job, on the ticked rows, or on every match
(queued.api's bulk operations), and a job's detail: payload, error, backtrace.

A bulk button's question is a promise (red team RT1, finding 7): its count (``?hold=1``) is
taken on a copy of the set kept for the answer (snapshot.py, ``held``), whose token the form
sends back; the action walks that copy, so it acts on at most the jobs counted, and says so.
A form posted without one (no script, a script of the operator's) acts on the jobs present
when it arrives.

A row names its job by score and a digest of its exact bytes (``SCORE|DIGEST``): a member that
is not JSON, or whose jid is empty or shared, is still addressed alone (issue 20).
"""
from __future__ import annotations


import math

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..entries import Entry, Filter
from ..jobsets import JobSet, Unmovable
from ..snapshot import Gone
from .filters import member_id as digest, plural
from .paging import CURSOR_MAX, int_param, page_size, pager
from .render import act, counted_of, path_param, query_text, render, search_text, web_of

#: URL -> (the JobSet's name, the title). Sidekiq's Web UI calls dead the morgue.
SETS = {"scheduled": ("schedule", "Scheduled"), "retries": ("retry", "Retries"),
        "dead": ("dead", "Dead")}
#: The search fields, by their query parameter (Filter's argument names); ``task``: a task
#: page's link to its jobs here.
FILTERS = {"class": "klass", "queue": "queue", "error": "error", "arg": "arg", "task": "task"}
#: A search step examines at most this many jobs before it shows what it found.
SCAN_BUDGET = 5000
ZSCAN_COUNT = 500


def _jobset(request: Request) -> tuple[str, JobSet, str]:
    slug = request.path_params["set"]
    if slug not in SETS:
        raise HTTPException(404, f"no job set {slug!r}")
    name, title = SETS[slug]
    return slug, web_of(request).admin.jobset(name), title


def filter_of(values) -> Filter:
    """The search a query (or a form) asks for. Class, queue, error and task: the text typed,
    or the name it shows in double quotes (render.search_text); arguments: text in their JSON,
    as typed (a raw NUL matched as the ``\\u0000`` JSON writes: entries.Filter)."""
    return Filter.of(**{arg: ((query_text(values, param).strip() if param == "arg" else
                               search_text(query_text(values, param))) or None)
                        for param, arg in FILTERS.items()})


def search(js: JobSet, where: Filter, cursor: int,
           wanted: int) -> tuple[list[Entry], int, int]:
    """(matches, the ZSCAN cursor to go on from (0: the end), jobs examined) for one bounded
    step of a search: ``wanted`` matches at most."""
    found: list[Entry] = []
    examined = calls = 0
    pattern = where.pattern()
    while True:
        cursor, rows = js.r.zscan(js.key, cursor, match=pattern, count=ZSCAN_COUNT)
        calls += 1
        for member, score in rows:
            examined += 1
            entry = Entry(member, score, js.name)
            if where.matches(entry):
                found.append(entry)
        # With a MATCH pattern Redis examines about COUNT jobs per call but returns only
        # those that fit: the budget counts what Redis examined, not what came back.
        examined = max(examined, calls * ZSCAN_COUNT)
        if cursor == 0 or len(found) >= wanted or examined >= SCAN_BUDGET:
            return found, int(cursor), min(examined, js.size())


def listing(request: Request):
    slug, js, title = _jobset(request)
    where = filter_of(request.query_params)
    context = {"slug": slug, "title": title, "name": js.name, "size": js.size(),
               "filters": {p: query_text(request.query_params, p) for p in FILTERS},
               "searching": bool(where)}
    if where:
        cursor = int_param(request, "cursor", 0, 0, CURSOR_MAX)
        rows, next_cursor, examined = search(js, where, cursor, page_size(request))
        # ZSCAN's order is the hash table's: show a step's matches in the set's own order
        rows.sort(key=lambda e: e.score or 0.0, reverse=js.name == "dead")
        context.update(rows=rows, next_cursor=next_cursor, examined=examined, pager=None,
                       step_size=page_size(request))
    else:
        page = pager(request, context["size"])
        context.update(rows=js.page(page.offset, page.size), pager=page)
    return render(request, "jobset.html", context)


def count(request: Request):
    """``{"count", "size"}``: how many jobs of the set match the search now (no search: the
    whole set), and the set's size. One ZSCAN pass (narrowed by a MATCH pattern when the
    search has one): about a second for 100,000 jobs, asked by the page after it is shown
    and by a bulk action's confirmation when it is clicked."""
    _slug, js, _title = _jobset(request)
    where = filter_of(request.query_params)
    if request.query_params.get("hold"):  # (a question's: the copy is kept for its answer)
        web_of(request).csrf.header(request)
        with js.snapshot(held=True, where=where) as snap:
            n = js.count_in(snap, where)
        return JSONResponse({"count": n, "size": snap.count, "token": snap.token},
                            headers={"cache-control": "no-store"})
    size = js.size()
    n = sum(1 for _ in js.scan(where)) if where else size
    return JSONResponse({"count": n, "size": size}, headers={"cache-control": "no-store"})


def _find(js: JobSet, score: str, jid: str | None = None,
          member: str | None = None) -> Entry | None:
    """The job at ``score`` whose bytes have the digest ``member`` (else whose jid is
    ``jid``): ZRANGEBYSCORE on that one score (O(log n)), not a scan."""
    try:
        value = float(score)
    except ValueError:
        return None
    if math.isnan(value):  # (Redis refuses a NaN score)
        return None
    for raw, s in js.r.zrangebyscore(js.key, value, value, withscores=True):
        entry = Entry(raw, s, js.name)
        if (digest(raw) == member) if member else (entry.jid == jid):
            return entry
    return None


def job(request: Request):
    slug, js, title = _jobset(request)
    entry = _find(js, request.path_params["score"], path_param(request, "jid"),
                  request.query_params.get("m"))
    if entry is None:
        raise HTTPException(404, "this job is no longer there (it ran, moved or was deleted)")
    return render(request, "job.html", {"slug": slug, "title": title, "name": js.name,
                                        "job": entry, "backtrace": entry.backtrace})


ACTIONS = ("retry", "delete", "kill")


async def action(request: Request):
    slug, js, title = _jobset(request)

    def work(web, form) -> str:
        what = str(form.get("action", ""))
        if what not in ACTIONS or (what == "kill" and js.name == "dead"):
            return f"unknown action {what!r}"
        left: list[Unmovable] = []
        if form.get("scope") == "all":
            where = filter_of({p: query_text(form, "f_" + p) for p in FILTERS})
            if form.get("snapshot"):
                return _on_counted(js, what, where, form, left) + _left_text(left, title)
            n = _all(js, what, where, left=left)
            return f"{_past(what)} {plural(n, 'job')}" + (
                " (every match)" if where else " (the whole set)") + _left_text(left, title)
        done = gone = 0
        for key in form.getlist("job"):
            score, _, member = str(key).partition("|")
            entry = _find(js, score, member=member)
            try:
                acted = entry is not None and getattr(js, what)(entry)
            except Unmovable as e:
                left.append(e)
                continue
            done, gone = (done + 1, gone) if acted else (done, gone + 1)
        text = f"{_past(what)} {plural(done, 'job')}"
        return text + (f"; {gone} no longer there" if gone else "") + _left_text(left, title)
    return await act(request, work, "jobset", set=slug)


def _all(js: JobSet, what: str, where: Filter, **kw) -> int:
    """``retry_all``/``delete_all``/``kill_all``; a retry's jobs left where they are go in
    ``left``."""
    if what != "retry":
        kw.pop("left", None)
    return getattr(js, f"{what}_all")(where, **kw)


def _left_text(left: list[Unmovable], title: str) -> str:
    """What a retry left where it was, and why (F4 #3: ``; 1 left in Dead: its payload names
    no queue ...``), grouped by why."""
    kinds: dict[str, int] = {}
    for e in left:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    return "".join(f"; {n:,} left in {title}: {kind}" for kind, n in kinds.items())


def _on_counted(js: JobSet, what: str, where: Filter, form, left: list) -> str:
    """Act on the jobs of the copy the question counted (its token in the form)."""
    try:
        snap = js.resume(str(form.get("snapshot")), where)
    except Gone as e:
        return f"nothing done: {e}; ask again"
    with snap:
        n = _all(js, what, where, snapshot=snap, left=left)
    return (f"{_past(what)} {plural(n, 'job')} of the {counted_of(form)} counted when asked "
            f"({'every match' if where else 'the whole set'} then; any since are left)")


def _past(verb: str) -> str:
    return {"retry": "retried", "delete": "deleted", "kill": "killed"}[verb]


routes = [Route("/{set:str}/count", count, name="jobset_count"),
          Route("/{set:str}/{score:str}/{jid:queued_name}", job, name="job"),
          Route("/{set:str}", listing, name="jobset"),
          Route("/{set:str}", action, methods=["POST"], name="jobset_action")]
