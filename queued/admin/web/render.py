"""What every page shares: the app's handles on Redis (``Web``), the Jinja2 templates (autoescape
on: job arguments and errors are attacker-controlled text) and their filters, rendering with
the CSRF token, redirects after a POST, and paging."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote, urlencode

import jinja2
from markupsafe import Markup
import redis as redis_lib
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.templating import Jinja2Templates

from ...client import Client
from ...keys import Keys
from ..api import Admin
from ..metrics import MetricsReader
from .security import FIELD, Csrf

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE_SIZE = 25
#: Characters left as they are in a path parameter (class names read Billing::InvoiceJob).
SAFE = ":@"
DOT_SEGMENTS = (".", "..")


@dataclass
class Web:
    r: redis_lib.Redis
    keys: Keys
    admin: Admin
    client: Client
    metrics: MetricsReader
    csrf: Csrf
    poll_interval: float


def web_of(request: Request) -> Web:
    return request.app.state.web


# --- filters ------------------------------------------------------------------------------------

def ago(ts: float | None, now: float | None = None) -> str:
    """``3m ago`` / ``in 4m`` (as queuedctl's tables say it)."""
    if ts is None:
        return "-"
    delta = (time.time() if now is None else now) - ts
    text = duration(abs(delta))
    return f"{text} ago" if delta >= 0 else f"in {text}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m {seconds % 60:.0f}s"
    if seconds < 86400:
        return f"{seconds // 3600:.0f}h {seconds % 3600 // 60:.0f}m"
    return f"{seconds // 86400:.0f}d {seconds % 86400 // 3600:.0f}h"


def utc(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def compact(value: Any, limit: int = 200) -> str:
    """Arguments on one line, cut at ``limit`` characters (the page escapes them)."""
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    return text if len(text) <= limit else text[:limit - 1] + "…"


def pretty(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str, indent=2, sort_keys=True)


def number(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def shown(name: str) -> str | Markup:
    """A name as a link's text: an empty or blank one says so (a link with no text cannot
    be seen or clicked)."""
    if not name.strip():
        return Markup('<em class="noname">(%s name)</em>') % ("empty" if not name else "blank")
    return name


templates = Jinja2Templates(env=jinja2.Environment(
    loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
    autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined))
templates.env.filters.update(ago=ago, duration=duration, utc=utc, compact=compact,
                             pretty=pretty, number=number, shown=shown)


# --- rendering ----------------------------------------------------------------------------------

def path_for(request: Request) -> Callable[..., str]:
    """``path('queue', name='x', _query={'page': 2})``: a path (no host: right behind a
    proxy), under the mount point when the app is mounted in another site.

    Each parameter is percent-encoded whole before it goes into the path (issue 16): a queue
    named ``critical?old`` is ``/queues/critical%3Fold``, and its row acts on it, not on
    ``critical`` with a query string; ``/``, ``#``, ``%``, spaces, newlines, any Unicode and
    the empty name round-trip the same way (the routes take the rest of the path, whatever it
    holds: ``{name:queued_name}``)."""
    def path(route: str, /, _query: dict | None = None, **params: Any) -> str:
        query = {k: v for k, v in (_query or {}).items() if v not in (None, "")}
        quoted = {}
        for k, v in params.items():
            quoted[k] = quote(str(v), safe=SAFE)
            if quoted[k] in DOT_SEGMENTS:
                # A browser resolves "." and ".." in a path, however encoded: such a name
                # goes in the query instead, behind an empty path part (path_param reads it).
                quoted[k], query[k] = "", str(v)
        url = request.url_for(route, **quoted).path
        return url + ("?" + urlencode(query, doseq=True) if query else "")
    return path


class NameConvertor(Convertor):
    """``{name:queued_name}``: the rest of the path, whatever it holds. Starlette's ``path``
    stops at a newline (``.*``), and the ``$`` after it matches before a final one, so a queue
    named ``critical\n`` was addressed as ``critical``."""
    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("queued_name", NameConvertor())


def path_param(request: Request, name: str) -> str:
    """A name from the path, as path_for wrote it: a "." or ".." comes in the query."""
    value = request.path_params[name]
    if value == "" and name in request.query_params:
        return request.query_params[name]
    return value


def render(request: Request, name: str, context: dict, status: int = 200):
    web = web_of(request)
    context = {"csrf_field": FIELD, "csrf_token": web.csrf.token(request),
               "path": path_for(request), "msg": request.query_params.get("msg", ""),
               "now": time.time(), **context}
    return templates.TemplateResponse(request, name, context, status_code=status)


async def act(request: Request, work: Callable[[Web, FormData], str], back: str,
              **params: Any) -> RedirectResponse:
    """A POST: check the CSRF token, do ``work(web, form)`` in the thread pool, and send the
    browser back to page ``back`` with what was done (Post/Redirect/Get)."""
    web = web_of(request)
    form = await web.csrf.form(request)
    try:
        message = await run_in_threadpool(work, web, form)
    except redis_lib.ResponseError as e:  # (a key of another type: nothing was done to it)
        message = f"Redis refused: {' '.join(str(e).split())}"
    query = {k: v for k, v in _back_query(form).items()}
    query["msg"] = message
    return RedirectResponse(path_for(request)(back, _query=query, **params), status_code=303)


def _back_query(form: FormData) -> dict:
    """The list filters a form carries back (``back_class``, ...) to the page it came from."""
    return {k[len("back_"):]: v for k, v in form.items() if k.startswith("back_") and v}


def int_param(request: Request, name: str, default: int = 0, low: int = 0,
              high: int = 10**9) -> int:
    try:
        value = int(request.query_params.get(name, default))
    except ValueError:
        value = default
    return min(max(value, low), high)


@dataclass
class Pager:
    page: int
    size: int
    total: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.size

    @property
    def pages(self) -> int:
        return max((self.total + self.size - 1) // self.size, 1)

    @property
    def prev(self) -> int | None:
        return self.page - 1 if self.page > 1 else None

    @property
    def next(self) -> int | None:
        return self.page + 1 if self.page < self.pages else None


def pager(request: Request, total: int, size: int = PAGE_SIZE) -> Pager:
    pages = max((total + size - 1) // size, 1)
    return Pager(int_param(request, "page", 1, 1, pages), size, total)
