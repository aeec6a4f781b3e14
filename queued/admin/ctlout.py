"""How ``queuedctl`` shows things, in one of four formats (``--format``): ``table`` (rich tables
for people, the default on a terminal), ``plain`` (one line per row, nothing wrapped or cut: the
default off a terminal), ``tsv`` (for scripts that cut columns) and ``json`` (one document);
a progress bar on stderr for bulk actions; times people read ("3m ago", "1.2 s").

``rich`` is an optional extra (``queued-jobs[admin]``) so a worker host stays lean: it is imported
only when a table or a progress bar is drawn on a terminal; ``plain``, ``tsv``, ``json``,
``ping`` and the one-line commands work without it.
"""
from __future__ import annotations

import json
import re
import sys
import time
from typing import Any, Callable, Iterable, Sequence

from . import ctltext

INSTALL_HINT = "queuedctl: tables need rich: pip install 'queued-jobs[admin]' (or use --json)"


class NeedRich(Exception):
    """rich is not installed and something asked for a table."""


def require_rich():
    try:
        import rich.console  # noqa: F401
        import rich.table  # noqa: F401
    except ImportError as e:
        raise NeedRich(INSTALL_HINT) from e
    import rich
    return rich


# --- the format ---------------------------------------------------------------------------------

#: What ``--format`` takes (``--json`` is ``--format json``).
FORMATS = ("table", "plain", "tsv", "json")


class _Output:
    """The format of this run, chosen once by ctl.py from the command line and stdout."""
    format = "table"


OUTPUT = _Output()


def use_format(name: str) -> None:
    OUTPUT.format = name


def default_format() -> str:
    """Rich tables for a person at a terminal; one line per row for a pipe or a file."""
    return "table" if sys.stdout.isatty() else "plain"


def lines_only() -> bool:
    """Off a terminal (plain, tsv): a cell is never cut, a row never wrapped."""
    return OUTPUT.format in ("plain", "tsv")


# --- JSON ---------------------------------------------------------------------------------------

#: A code point UTF-8 cannot encode (see json_text).
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(document: Any, **options: Any) -> str:
    """JSON text that is valid UTF-8 whatever Redis held: a name or a value read from bytes
    that are not UTF-8 holds surrogateescape's U+DC80..U+DCFF (names.py), a JSON string from
    Node may hold a lone ``\\ud83d``; each such code point is written as its ``\\uXXXX``
    escape (raw, it was bytes that are not UTF-8, or an encoding error under a strict UTF-8
    stdout). ``json.loads`` gives the same text back, and ``.encode("utf-8",
    "surrogateescape")`` a name's bytes."""
    text = json.dumps(document, ensure_ascii=False, **options)
    if _SURROGATE.search(text):  # (only ever inside a string: the rest of the text is ASCII)
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def emit_json(document: Any) -> None:
    """The one JSON document a ``--json`` run prints on stdout."""
    sys.stdout.write(json_text(document, indent=2) + "\n")


def say(text: str, stream=None) -> None:
    """A line for people on stdout (what was done), or on ``stream``; what a terminal acts on
    escaped (ctltext.visible: names and messages in it come from Redis)."""
    (stream or sys.stdout).write(ctltext.visible_lines(text) + "\n")
    (stream or sys.stdout).flush()  # (a line a watching script reads as it comes)


def warn(text: str) -> None:
    sys.stderr.write(f"queuedctl: {ctltext.visible_lines(text)}\n")


def name(text: str) -> str:
    """A name (queue, process, class, task, periodic job) for people: ctltext.name, except in
    tsv, whose escapes are unambiguous already."""
    return str(text) if OUTPUT.format == "tsv" else ctltext.name(text)


# --- tables -------------------------------------------------------------------------------------

#: Columns of ids: never wrapped (a jid cut in two cannot be copied); others fold instead.
WHOLE = ("JID", "ID", "Identity", "Process")


def console():
    """rich's console on stdout, data printed as it is."""
    return _console()


def _console():
    # No markup: a job's arguments or error text such as "[bold]" or [true] is data, and
    # rich would take it for a style and print nothing.
    from rich.console import Console
    return Console(highlight=False, markup=False)


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                caption: str | None = None, right: Sequence[str] = (),
                more: str | None = None) -> None:
    """A listing on stdout. ``more`` says rows were left out (--limit): the caption's end in
    a table; in plain and tsv, where stdout holds the rows only, a line on stderr.

    As a table (``--format table``, a terminal) rich draws it as wide as the terminal (or
    $COLUMNS); long cells wrap (fold) rather than lose their end, and ids keep their whole
    width. In plain and tsv every row is one line (ctltext.py), with no title or caption."""
    if more:
        caption = f"{caption} ({more})" if caption else more
    if lines_only():
        draw = ctltext.tsv_lines if OUTPUT.format == "tsv" else ctltext.plain_lines
        for line in draw(columns, ([str(cell) for cell in row] for row in rows)):
            sys.stdout.write(line + "\n")
        if more:
            warn(caption)
        return
    require_rich()
    from rich.table import Table
    from rich.text import Text
    cells = [[ctltext.one_line(cell) for cell in row] for row in rows]
    table = Table(title=title and ctltext.visible(title),
                  caption=caption and ctltext.visible(caption), title_justify="left",
                  caption_justify="left")
    for name in columns:
        # (no_wrap, not min_width: rich shrinks the other columns around a no_wrap one, but
        # crops the table's right side to honour a min_width)
        table.add_column(name, justify="right" if name in right else "left",
                         overflow="fold", no_wrap=name in WHOLE)
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))
    _console().print(table)


def print_pairs(title: str, pairs: Sequence[tuple[str, Any]]) -> None:
    """A title line (longer than the table is wide: a URL), then names and values (off a
    terminal: a line per name, without the title)."""
    if lines_only():
        draw = ctltext.tsv_lines if OUTPUT.format == "tsv" else ctltext.plain_lines
        for line in list(draw(["Name", "Value"], ([k, str(v)] for k, v in pairs)))[1:]:
            sys.stdout.write(line + "\n")
        return
    require_rich()
    from rich.table import Table
    table = Table(show_header=False)
    table.add_column("name")
    table.add_column("value", justify="right")
    for label, value in pairs:
        table.add_row(label, ctltext.one_line(value))
    console = _console()
    console.print(ctltext.visible(title))
    console.print(table)


# --- progress -----------------------------------------------------------------------------------

Progress = Callable[[int, int], None]


class Bar:
    """A progress bar on stderr for a bulk action over about ``total`` jobs, shown only when
    stderr is a terminal (and rich is there); otherwise ``callback`` is None and nothing is
    drawn, so a cron job's mail or a CI log gets the final count only."""

    def __init__(self, label: str, total: int, acted: bool = True):
        self.label = label
        self.total = total
        self.acted = acted  # False: a read (examined only, nothing acted on)
        self._progress = None
        self._task = None

    def __enter__(self) -> Bar:
        if not sys.stderr.isatty():
            return self
        try:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                       TextColumn, TimeElapsedColumn)
        except ImportError:
            return self
        self._progress = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("examined, {task.fields[done]} acted on" if self.acted else
                       "examined"), TimeElapsedColumn(),
            console=Console(stderr=True), transient=False)
        self._progress.start()
        self._task = self._progress.add_task(ctltext.visible(self.label),
                                             total=max(self.total, 1), done=0)
        return self

    @property
    def callback(self) -> Progress | None:
        return self._update if self._progress is not None else None

    def _update(self, examined: int, done: int) -> None:
        # The set shrinks and grows while it is walked: never let the bar pass its end.
        total = max(self.total, examined, 1)
        self._progress.update(self._task, completed=examined, total=total, done=done)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


# --- confirmation -------------------------------------------------------------------------------

def confirm(question: str) -> bool:
    """Ask on the terminal (the question on stderr, so stdout stays the command's output)."""
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        return False
    return answer.strip().lower() in ("y", "yes")


# --- what people read ---------------------------------------------------------------------------

def duration(seconds: float | None) -> str:
    """1.2 s, 45 s, 3m 20s, 2h 5m, 3d 4h: two units at most, as precise as a person needs
    (in tsv: seconds, 0.001 s precise)."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if OUTPUT.format == "tsv":
        return f"{seconds:.3f}"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


def _short(seconds: float) -> str:
    """The largest unit only: 5s, 3m, 2h, 4d (for "ago" and "in")."""
    seconds = abs(seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def when(epoch: float | None, now: float) -> str:
    """"3m ago", "in 5m", "now" (within a second), or "-" when unknown (in tsv: the UTC
    time, ``2026-11-30T12:00:05Z``)."""
    if epoch is None:
        return "-"
    if OUTPUT.format == "tsv":
        return utc(epoch)
    delta = epoch - now
    if abs(delta) < 1:
        return "now"
    return f"in {_short(delta)}" if delta > 0 else f"{_short(delta)} ago"


def utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def count(n: int) -> str:
    """2,000 (in tsv: 2000)."""
    return str(n) if OUTPUT.format == "tsv" else f"{n:,}"


def plural(n: int, noun: str) -> str:
    """"1 job", "2,000 jobs", "1 process", "3 processes"."""
    if n == 1:
        return f"1 {noun}"
    return f"{n:,} {noun}{'es' if noun.endswith('s') else 's'}"


def megabytes(kb: int | None) -> str:
    if kb is None:
        return "-"
    return f"{kb / 1024:.0f}" + ("" if OUTPUT.format == "tsv" else " MB")


def cut(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis in a table; never
    cut off a terminal (plain, tsv), where the row is one line however long."""
    if OUTPUT.format == "tsv":
        return text  # (escaped by ctltext.tsv_cell: nothing lost)
    text = ctltext.one_line(text)
    if lines_only():
        return text
    if len(text) <= width:
        return text
    text = text[:width - 1]
    if "\\" in text[-6:]:  # (an escape cut in two would read as another character)
        text = text[:text.rindex("\\")]
    return text + "…"


def compact(value: Any, width: int = 60) -> str:
    """Arguments as compact JSON, cut to ``width`` characters."""
    return cut(json.dumps(value, ensure_ascii=False, separators=(",", ":")), width)
