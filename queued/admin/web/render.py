"""What every page shares: the app's handles on Redis (``Web``), the Jinja2 templates (autoescape
on: job arguments and errors are attacker-controlled text; filters.py), links that address any
name exactly, rendering with the CSRF token, the stats bar, the footer and the flash message,
and redirects after a POST."""
from __future__ import annotations

import base64
import binascii
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote, urlencode

import jinja2
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
from ..ctltext import read_name
from ..names import is_exact
from .filters import FILTERS, finalize
from .flash import Flash
from .frame import BAR, Footer, stats_bar
from .paging import PAGE_SIZE, SIZES, Pager, int_param, pager
from .security import FIELD, Csrf

#: (PAGE_SIZE, Pager, int_param, pager too: pages written before paging.py import them here)
__all__ = ["Web", "web_of", "templates", "path_for", "path_param", "query_text", "search_text",
           "form_text",
           "form_texts", "counted_of", "render", "act", "PAGE_SIZE", "Pager", "int_param", "pager"]

HERE = os.path.dirname(os.path.abspath(__file__))
#: Characters left as they are in a path parameter (class names read Billing::InvoiceJob).
SAFE = ":@"
DOT_SEGMENTS = (".", "..")
#: A name UTF-8 cannot encode travels in the query as ``<param>~`` (see path_for).
EXACT = "~"


@dataclass
class Web:
    r: redis_lib.Redis
    keys: Keys
    admin: Admin
    client: Client
    metrics: MetricsReader
    csrf: Csrf
    flash: Flash
    footer: Footer
    poll_interval: float
    nav: tuple = ()


def web_of(request: Request) -> Web:
    return request.app.state.web


templates = Jinja2Templates(env=jinja2.Environment(
    loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
    autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
    finalize=finalize))
templates.env.filters.update(FILTERS)


# --- links ----------------------------------------------------------------------------------

def path_for(request: Request) -> Callable[..., str]:
    """``path('queue', name='x', _query={'page': 2})``: a path (no host: right behind a
    proxy), under the mount point when the app is mounted in another site.

    Each parameter is percent-encoded whole before it goes into the path (issue 16): a queue
    named ``critical?old`` is ``/queues/critical%3Fold``, and its row acts on it, not on
    ``critical`` with a query string; ``/``, ``#``, ``%``, spaces, newlines, any Unicode and
    the empty name round-trip the same way (the routes take the rest of the path, whatever it
    holds: ``{name:queued_name}``).

    A name whose bytes in Redis are not UTF-8 (``queue:\\xff\\xfe``, read with surrogateescape:
    admin/names.py) cannot go in the path: the server decodes a path as UTF-8 and would turn
    those bytes into U+FFFD, another name. It goes in the query as ``name~=`` base64 of its
    code points (surrogatepass: any Python text round-trips), behind an empty path part."""
    def path(route: str, /, _query: dict | None = None, **params: Any) -> str:
        query = {}
        for k, v in (_query or {}).items():
            if v in (None, ""):
                continue
            if isinstance(v, str) and not is_exact(v):  # (query_text reads it back)
                query[k + EXACT] = exact_token(v)
            else:
                query[k] = v
        quoted = {}
        for k, v in params.items():
            text = str(v)
            if not is_exact(text):
                quoted[k], query[k + EXACT] = "", exact_token(text)
                continue
            quoted[k] = quote(text, safe=SAFE)
            if quoted[k] in DOT_SEGMENTS:
                # A browser resolves "." and ".." in a path, however encoded: such a name
                # goes in the query instead, behind an empty path part (path_param reads it).
                quoted[k], query[k] = "", text
        url = request.url_for(route, **quoted).path
        return url + ("?" + urlencode(query, doseq=True) if query else "")
    return path


def exact_token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode().rstrip("=")


def from_exact_token(token: str) -> str | None:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        return raw.decode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError):
        return None


def query_text(values: Any, name: str, default: str = "") -> str:
    """A text from the query (or a form) as path_for wrote it: ``name``, or ``name~`` for a
    text UTF-8 cannot encode."""
    token = values.get(name + EXACT)
    if token is not None:
        exact = from_exact_token(str(token))
        if exact is not None:
            return exact
    return str(values.get(name, default))


def search_text(raw: str) -> str:
    """What a search box's text looks for: the text without blanks at its ends, or, when it
    is a name as the page shows one in double quotes (``"y\\x00z"``, ``"critical "``), that
    name (ctltext.read_name): a NUL, a newline or a trailing blank cannot be typed, nor sent
    by a browser as they are (a NUL comes back as U+FFFD), but what the page shows can."""
    text = raw.strip()
    name = read_name(text)
    return text if name is None else name


def form_text(form: FormData, field: str) -> str:
    """A form's name as the page wrote it (macros.html ``exact``): a name UTF-8 cannot encode
    comes as ``<field>~``, the same encoding as in a link."""
    return query_text(form, field)


def form_texts(form: FormData, field: str) -> list[str]:
    """Every value of a field the page wrote several times with ``exact`` (a list of names),
    each as it was written."""
    found = [str(v) for v in form.getlist(field)]
    for token in form.getlist(field + EXACT):
        exact = from_exact_token(str(token))
        if exact is not None:
            found.append(exact)
    return found


#: Characters a hidden field may not carry as they are: a browser sends a field's newline as
#: CRLF (red team RT1, finding 9, "no periodic job named 'x\\r\\ny'") and reads a NUL in an
#: attribute as U+FFFD (RT4, finding 1: a search's "delete every match" of class y<NUL>z
#: deleted the jobs of class y<U+FFFD>z); every other control character goes the same way.
NOT_AS_IS = re.compile("[\x00-\x1f\x7f-\x9f]")


def in_form_as_is(value: Any) -> bool:
    """Whether a hidden field carries ``value`` as it is: text UTF-8 can encode, without a
    control character (NOT_AS_IS). Anything else goes as ``<field>~``."""
    return isinstance(value, str) and is_exact(value) and not NOT_AS_IS.search(value)


def counted_of(form: FormData) -> str:
    """The number a question asked with, as the form sends it back (for the message): ASCII
    digits only (str.isdigit() takes "²", which int() refuses: a 500 after the action had been
    done, RT4 #4)."""
    text = str(form.get("counted", ""))
    return f"{int(text):,}" if re.fullmatch("[0-9]+", text) else "?"


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
templates.env.globals.update(exact_token=exact_token, EXACT=EXACT, in_form_as_is=in_form_as_is)


def path_param(request: Request, name: str) -> str:
    """A name from the path, as path_for wrote it: a "." or "..", or a name that is not
    UTF-8, comes in the query."""
    value = request.path_params[name]
    if value == "":
        if name in request.query_params:
            return request.query_params[name]
        token = request.query_params.get(name + EXACT)
        exact = from_exact_token(token) if token is not None else None
        if exact is not None:
            return exact
    return value


# --- pages ----------------------------------------------------------------------------------

def render(request: Request, name: str, context: dict, status: int = 200):
    """The page ``name`` with the frame every page has: the stats bar, the footer, the flash
    message left by the action that sent the browser here (shown once)."""
    web = web_of(request)
    context = {"csrf_field": FIELD, "csrf_token": web.csrf.token(request),
               "path": path_for(request), "msg": web.flash.take(request), "now": time.time(),
               "bar": stats_bar(web.admin), "bar_links": BAR, "footer": web.footer,
               "nav": web.nav, "sizes": SIZES, **context}
    response = templates.TemplateResponse(request, name, context, status_code=status)
    web.flash.clear(response, request)
    return response


async def act(request: Request, work: Callable[[Web, FormData], str], back: str,
              **params: Any) -> RedirectResponse:
    """A POST: check the CSRF token, do ``work(web, form)`` in the thread pool, and send the
    browser back to page ``back``, which says what was done (Post/Redirect/Get; the message
    in a signed cookie: flash.py)."""
    web = web_of(request)
    form = await web.csrf.form(request)
    try:
        message = await run_in_threadpool(work, web, form)
    except redis_lib.ResponseError as e:  # (a key of another type: nothing was done to it)
        message = f"Redis refused: {' '.join(str(e).split())}"
    response = RedirectResponse(path_for(request)(back, _query=_back_query(form), **params),
                                status_code=303)
    web.flash.put(response, request, message)
    return response


def _back_query(form: FormData) -> dict:
    """The list filters a form carries back (``back_class``, ...) to the page it came from."""
    return {k[len("back_"):]: v for k, v in form.items() if k.startswith("back_") and v}
