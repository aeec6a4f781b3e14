"""``queuedctl``'s listings off a terminal: one line per row, nothing wrapped or cut (issue 20:
a pipe used to get an 80-column rich table, whose 8-character Error column broke one job over
several lines, so ``queuedctl jobs dead --limit 0 | grep -c TimeoutError`` counted 0 of 850).

Two shapes, neither needing rich (a worker host without ``queued-jobs[admin]`` can pipe too):

- plain: a header line, then each row with its columns left-aligned and two spaces apart (as
  ``kubectl get`` and ``docker ps`` print), for ``grep``, ``wc -l``, ``less -S`` and people;
- tsv: the same header and rows separated by tabs, every cell on its line with backslash,
  tab, newline and carriage return written ``\\\\``, ``\\t``, ``\\n``, ``\\r`` (the text format
  of PostgreSQL's COPY and IANA's TSV), for ``cut``, ``awk -F'\\t'`` and spreadsheets.
"""
from __future__ import annotations

import unicodedata
from typing import Iterable, Iterator, Sequence

#: Between two plain columns: two spaces, so a header name or a cell with one space inside
#: ("Next retry", "3m ago") still reads as one column.
GAP = "  "

_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines, tabs) as one space, nothing cut."""
    return " ".join(str(text).split())


def tsv_cell(text: str) -> str:
    return str(text).translate(_TSV_ESCAPES)


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
