"""``queuedctl``'s listings off a terminal: one line per row, nothing wrapped or cut (issue 20:
a pipe used to get an 80-column rich table, whose 8-character Error column broke one job over
several lines, so ``queuedctl jobs dead --limit 0 | grep -c TimeoutError`` counted 0 of 850).

Two shapes, neither needing rich (a worker host without ``queued-jobs[admin]`` can pipe too):

- plain: a header line, then each row with its columns left-aligned and two spaces apart (as
  ``kubectl get`` and ``docker ps`` print), for ``grep``, ``wc -l``, ``less -S`` and people;
- tsv: the same header and rows separated by tabs, every cell on its line with backslash,
  tab, newline and carriage return written ``\\\\``, ``\\t``, ``\\n``, ``\\r`` (the text format
  of PostgreSQL's COPY and IANA's TSV), for ``cut``, ``awk -F'\\t'`` and spreadsheets.

Text from jobs is data written by anyone (an error message built from user input): printed raw,
an ESC could move the cursor, erase the rows above, hide what follows, set the window title or
plant a link (red team RT1, finding 2). So every format for people escapes what a terminal
acts on, as the daemon's log does (``\\x1b``); and a name (a queue, a process, a class) that
would look like another (``critical`` and ``critical\\n``, a name with blanks at an end, the
empty one) is shown quoted, with escapes (finding 14).
"""
from __future__ import annotations

import re
import unicodedata
from typing import Iterable, Iterator, Sequence

#: Between two plain columns: two spaces, so a header name or a cell with one space inside
#: ("Next retry", "3m ago") still reads as one column.
GAP = "  "

#: What a terminal acts on, or what reads otherwise than it runs, written escaped wherever data
#: is shown: the C0 controls and DEL (ESC starts the sequences, CR goes back over the line), the
#: C1 controls (0x9b is a one-byte CSI to some terminals), the line and paragraph separators,
#: the bidirectional embeddings, overrides and isolates; and the surrogates that UTF-8 cannot
#: encode (a byte that was not UTF-8, names.py, or a JSON string's lone ``\\udXXX``).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def escape_char(c: str) -> str:
    """``\\n``, ``\\x1b``, ``\\xff`` for a byte that was not UTF-8 (surrogateescape's
    U+DC80..U+DCFF), ``\\u202e``, ``\\ud83d``."""
    if c in _NAMED:
        return _NAMED[c]
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every UNSAFE character escaped (a backslash stays as it is)."""
    text = str(text)
    return UNSAFE.sub(lambda m: escape_char(m.group()), text) if UNSAFE.search(text) else text


def visible_lines(text: str) -> str:
    """``visible``, but its line breaks kept (a message of several lines queuedctl wrote)."""
    return "\n".join(visible(line) for line in str(text).split("\n"))


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines, tabs) as one space, nothing cut, and
    what a terminal acts on escaped."""
    return visible(" ".join(str(text).split()))


def name(text: str) -> str:
    """A name as people read it: as it is when nothing else can look the same; else in double
    quotes, with a backslash, a double quote, a second space in a row and what UNSAFE holds
    escaped (``""`` is the empty name, ``"critical\\n"`` is not ``critical``, ``"\\xff\\xfe"``
    is two bytes that are not UTF-8)."""
    text = str(text)
    if (text and text == text.strip() and not text.startswith('"') and "  " not in text
            and not UNSAFE.search(text)):
        return text
    out, last = [], ""
    for c in text:
        if c in '\\"':
            out.append("\\" + c)
        elif c == " " and last == " ":
            out.append("\\x20")
        elif UNSAFE.match(c):
            out.append(escape_char(c))
        else:
            out.append(c)
        last = c
    return '"' + "".join(out) + '"'


def tsv_cell(text: str) -> str:
    """A cell of tsv: backslash, tab, newline and carriage return as COPY writes them, the rest
    of UNSAFE as ``\\xNN`` (COPY's hex escape) or ``\\uNNNN``."""
    return visible(str(text).translate(_TSV_ESCAPES))


def width(text: str) -> int:
    """Terminal columns ``text`` takes: East Asian wide and full-width characters take two,
    combining marks none (so a column of Japanese job names stays aligned)."""
    total = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        total += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return total


def plain_lines(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> Iterator[str]:
    """The header and the rows, aligned; no line ends in blanks (an empty last cell)."""
    cells = [[one_line(c) for c in row] for row in rows]
    widths = [max([width(name), *(width(row[i]) for row in cells)])
              for i, name in enumerate(columns)]
    for row in [list(columns), *cells]:
        padded = [cell + " " * (widths[i] - width(cell)) for i, cell in enumerate(row[:-1])]
        yield GAP.join([*padded, row[-1]]).rstrip() if row else ""


def tsv_lines(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> Iterator[str]:
    yield "\t".join(tsv_cell(c) for c in columns)
    for row in rows:
        yield "\t".join(tsv_cell(c) for c in row)
