"""The templates' filters: times (UTC on the page, the browser's local time on hover), durations
(sub-millisecond ones as such), numbers, arguments, and names as text.

Any text from Redis may hold what UTF-8 cannot encode: a name read from bytes that are not
UTF-8 (decoded with surrogateescape, queued/admin/names.py) or a JSON string with a lone
``\\udXXX`` escape. Such text would make the page's encoding fail (a 500), so ``visible``
shows each of those code points as an escape (``\\xff`` for a byte that was not UTF-8), and
the environment applies it to every value a template prints (``finalize``)."""
from __future__ import annotations

import datetime as dt
import hashlib
import re
import time
from typing import Any

from markupsafe import Markup

from ..ctltext import name as ctl_name
from ..ctltext import as_json_text, name_pieces, plain_name, shown_json, text_pieces

#: A code point UTF-8 cannot encode: a surrogate.
_SURROGATE = re.compile("[\ud800-\udfff]")


def visible(text: str) -> str:
    """``text`` with each surrogate shown as an escape: ``\\xff`` for a byte that was not
    UTF-8 (surrogateescape's U+DC80..U+DCFF), ``\\udXXX`` for any other."""
    if not _SURROGATE.search(text):
        return text

    def shown(m: re.Match) -> str:
        c = ord(m.group())
        return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"
    cleaned = _SURROGATE.sub(shown, text)
    return Markup(cleaned) if isinstance(text, Markup) else cleaned


def finalize(value: Any) -> Any:
    """Every printed value: text made encodable (the rest as Jinja prints it)."""
    return visible(value) if isinstance(value, str) else value


# --- times ----------------------------------------------------------------------------------

def iso(ts: float) -> str:
    """ISO 8601 in UTC, for ``<time datetime>`` (static/app.js reads it for the local time)."""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def utc_text(ts: float | None) -> str:
    """Plain text, for where markup cannot go (an SVG ``<title>``, an attribute)."""
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def utc(ts: float | None) -> str | Markup:
    """``2026-11-26 15:21:45 UTC``, the browser's local time on hover (app.js sets the
    title)."""
    if ts is None:
        return "-"
    return Markup('<time class="ts" datetime="%s">%s</time>') % (iso(ts), utc_text(ts))


def ago(ts: float | None, now: float | None = None) -> str | Markup:
    """``3m ago`` / ``in 4m`` (as queuedctl's tables say it), the UTC time and the local time
    on hover."""
    if ts is None:
        return "-"
    delta = (time.time() if now is None else now) - ts
    text = duration(abs(delta))
    text = f"{text} ago" if delta >= 0 else f"in {text}"
    return Markup('<time class="ts" datetime="%s" title="%s">%s</time>') % (
        iso(ts), utc_text(ts), text)


def duration(seconds: float | None) -> str:
    """A duration to read at a glance. Below a millisecond it keeps two decimals (0.42 ms: a
    fast job's mean time is not "0 ms"), below 10 ms one."""
    if seconds is None:
        return "-"
    if seconds < 1:
        ms = seconds * 1000
        if ms == 0:
            return "0 ms"
        if ms < 1:
            return f"{ms:.2f} ms"
        if ms < 10:
            return f"{ms:.1f} ms"
        return f"{ms:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m {seconds % 60:.0f}s"
    if seconds < 86400:
        return f"{seconds // 3600:.0f}h {seconds % 3600 // 60:.0f}m"
    return f"{seconds // 86400:.0f}d {seconds % 86400 // 3600:.0f}h"


# --- values ---------------------------------------------------------------------------------

def compact(value: Any, limit: int = 200) -> str:
    """Arguments on one line, cut at ``limit`` characters (the page escapes them), what shows
    as nothing or as another character written as its JSON escape (ctltext.shown_json: the
    text the argument search matches)."""
    text = shown_json(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def pretty(value: Any) -> str:
    return shown_json(value, (",", ": "), indent=2, sort_keys=True)


def number(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def plural(n: int, word: str, words: str | None = None) -> str:
    """``1 job``, ``400 jobs`` (the numbers of the confirmations)."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def marked(name: Any) -> str | Markup:
    """A name as queuedctl shows it (ctltext.name): as it is when nothing else can look the
    same; else in double quotes, each character a page would not show, or would show as
    another (a newline, a tab, a NUL, a zero-width space, a bidi override, a no-break space, a
    byte that is not UTF-8), escaped and marked, so ``critical``, ``"critical\\n"`` and
    ``"critical "`` read differently (red team RT4, finding 3: all three read "critical",
    ``nul\\0byte`` read as ``nul\ufffdbyte``). The empty name reads ``""``, as in queuedctl."""
    text = str(name)
    if plain_name(text):
        return text
    if not text:
        return Markup('<span class="noname" title="the empty name">""</span>')
    return Markup("").join(['"', *_spans(name_pieces(text)), '"'])


def visible_text(text: Any) -> str | Markup:
    """Free text (a backtrace line) as it is, but each character that shows as nothing or as
    another escaped and marked (ctltext.text_pieces)."""
    text = str(text)
    if plain_name(text.strip()):
        return text
    return Markup("").join(_spans(text_pieces(text)))


def _spans(pieces) -> list:
    return [Markup('<span class="%s" title="%s">%s</span>') % (
        "byte" if why == "byte" else "esc", WHY[why], piece) if why else piece
        for piece, why in pieces]


#: The title of an escape (what hovering it says).
WHY = {"byte": "a byte that is not UTF-8", "space": "a second space",
       "char": "a character shown escaped"}


def marked_cut(text: Any, limit: int = 160) -> str | Markup:
    """Free text from a job (an error message) in a cell: ``marked`` (a message that would
    read as another is quoted, its hidden characters escaped, as the search box takes it),
    cut at ``limit`` characters with an ellipsis outside the quotes."""
    text = str(text)
    if len(text) <= limit:
        return marked(text)
    return Markup("%s…") % marked(text[:limit - 1])


def shown(name: str) -> str | Markup:
    """A name as a link's text (``marked``: the empty one reads ``""``, a link that can be
    seen and clicked)."""
    return marked(name)


def named(name: Any) -> str:
    """A name as plain text, where markup cannot go (a page's title, an attribute)."""
    return ctl_name(str(name))


def typed(raw: Any) -> str:
    """A search box's value: what it looks for (render.search_text) as the page shows a name,
    so the box holds no character a browser would change and searches the same again."""
    from .render import search_text  # (render imports this module)
    looked_for = search_text(str(raw))
    return ctl_name(looked_for) if looked_for else ""


def typed_json(raw: Any) -> str:
    """The argument box's value: the text with each character JSON writes escaped as that
    escape (ctltext.as_json_text: what it matches in the arguments' JSON)."""
    return as_json_text(str(raw).strip())


def in_question(name: str) -> str:
    """A name in a confirmation's question (plain text: an attribute), as queuedctl shows it,
    its braces doubled so app.js fills only the question's own ``{n}``."""
    return ctl_name(str(name)).replace("{", "{{").replace("}", "}}")


def raw_text(raw: bytes) -> str:
    """A stored member that is not JSON, as text: bytes that are not UTF-8 as ``\\xff``."""
    return raw.decode("utf-8", "backslashreplace")


def member_id(raw: bytes) -> str:
    """A row's name for its job: a digest of the member's exact bytes (pages_jobs)."""
    return hashlib.sha1(raw).hexdigest()[:16]


FILTERS = {"ago": ago, "duration": duration, "utc": utc, "utc_text": utc_text, "iso": iso,
           "compact": compact, "pretty": pretty, "number": number, "plural": plural,
           "shown": shown, "marked": marked, "marked_cut": marked_cut, "named": named,
           "visible_text": visible_text, "typed": typed, "typed_json": typed_json,
           "visible": visible, "raw_text": raw_text,
           "member_id": member_id, "in_question": in_question}
