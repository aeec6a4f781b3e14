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
empty one, one holding a zero-width space: F4 #1) is shown quoted, with escapes (finding 14).
The dashboard shows names the same way (web/filters.py), reads a quoted one typed in a search
box back (``read_name``, F4 #2), and shows arguments as JSON with the same characters escaped
(``shown_json``).
"""
from __future__ import annotations

import json
import re
import unicodedata
from typing import Any, Callable, Iterable, Iterator, Sequence

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
    """``\\n``, ``\\x1b`` (ASCII), ``\\xff`` for a byte that was not UTF-8 (surrogateescape's
    U+DC80..U+DCFF: ``\\xNN`` past 7f is always a byte), ``\\u0085``, ``\\u202e``, ``\\ud83d``,
    ``\\U000e0041``: C1 controls are ``\\u00NN``, or U+0085 and the byte 0x85 would read
    alike."""
    if c in _NAMED:
        return _NAMED[c]
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


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


# --- names --------------------------------------------------------------------------------------

#: Beyond UNSAFE, what a name shows as nothing or as another character: spaces other than
#: U+0020 (a no-break space reads as a space), format characters (zero-width spaces and
#: joiners, LRM/RLM, the BOM, a soft hyphen, tag characters), private-use and unassigned code
#: points (each an empty box), line and paragraph separators; and these, which Unicode counts
#: as letters or marks but which draw nothing: the combining grapheme joiner, the Hangul
#: fillers, the Braille blank, the Mongolian and the (supplementary) variation selectors.
_HIDDEN_CATEGORIES = frozenset(("Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"))
_BLANK = re.compile("[\u034f\u115f\u1160\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0"
                    "\U000e0100-\U000e01ef]")


def _hidden(c: str) -> bool:
    """Whether ``c`` (not ASCII) is escaped in a name."""
    return ((unicodedata.category(c) in _HIDDEN_CATEGORIES and c != " ")
            or _BLANK.match(c) is not None)


def _escaped_in(text: str) -> Callable[[str], bool]:
    """Which characters of ``text`` a name shows escaped: UNSAFE and what shows as nothing or
    as another character (_hidden); in a name that is not in Unicode's composed form (NFC)
    also each combining mark and each character NFC would change, so ``cafe\\u0301`` does not
    read as ``caf\u00e9``."""
    if text.isascii():
        return lambda c: UNSAFE.match(c) is not None
    composed = unicodedata.is_normalized("NFC", text)
    return lambda c: (UNSAFE.match(c) is not None or _hidden(c) or (not composed and (
        unicodedata.category(c).startswith("M") or unicodedata.normalize("NFC", c) != c)))


def plain_name(text: str) -> bool:
    """Whether ``name(text)`` is ``text`` itself: nothing else can look the same."""
    if not text or text != text.strip() or text.startswith('"') or "  " in text:
        return False
    if text.isascii():  # (the common case: one regex search, as before F4)
        return UNSAFE.search(text) is None
    escaped = _escaped_in(text)
    return not any(escaped(c) for c in text)


def name_pieces(text: str) -> Iterator[tuple[str, str | None]]:
    """The inside of a quoted name, piece by piece: (text, None) as it is, or (an escape,
    why) for a character shown escaped: ``"byte"`` (a byte that is not UTF-8), ``"space"`` (a
    second space in a row) or ``"char"``. A backslash and a double quote are ``\\\\`` and
    ``\\"``."""
    escaped, last = _escaped_in(text), ""
    for c in text:
        if c in '\\"':
            yield "\\" + c, None
        elif c == " " and last == " ":
            yield "\\x20", "space"
        elif escaped(c):
            yield escape_char(c), "byte" if 0xDC80 <= ord(c) <= 0xDCFF else "char"
        else:
            yield c, None
        last = c


def text_pieces(text: str) -> Iterator[tuple[str, str | None]]:
    """Free text (a backtrace line), piece by piece as name_pieces, but nothing quoted: only
    the characters that show as nothing or as another are escaped."""
    escaped = _escaped_in(text)
    for c in text:
        if escaped(c):
            yield escape_char(c), "byte" if 0xDC80 <= ord(c) <= 0xDCFF else "char"
        else:
            yield c, None


def name(text: str) -> str:
    """A name as people read it: as it is when nothing else can look the same; else in double
    quotes, with a backslash, a double quote, a second space in a row and every character
    that shows as nothing or as another escaped (``""`` is the empty name, ``"critical\\n"``
    is not ``critical``, ``"\\xff\\xfe"`` is two bytes that are not UTF-8, ``"a\\u200bb"``
    holds a zero-width space). Homoglyphs (a Cyrillic a for a Latin one) are not told apart."""
    text = str(text)
    if plain_name(text):
        return text
    return '"' + "".join(piece for piece, _ in name_pieces(text)) + '"'


#: An escape inside a quoted name: \\xNN, \\uNNNN, \\UNNNNNNNN, or \\\\ \\" \\n \\r \\t.
_ESCAPE = re.compile(r'\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|([\\"nrt]))')
_NAMED_BACK = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"'}


def read_name(text: str) -> str | None:
    """The name a quoted text spells as ``name`` writes it (``"nul\\x00byte"`` is nul, NUL,
    byte; ``\\xNN`` past 7f is a byte that is not UTF-8, U+DC80..U+DCFF as names.py reads
    one), so what a page or queuedctl shows can be typed back; None for a text that is not
    one (no quotes around it, a quote inside left bare, an escape name never writes)."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return None
    inner, out, i = text[1:-1], [], 0
    while i < len(inner):
        c = inner[i]
        if c == '"':
            return None
        if c != "\\":
            out.append(c)
            i += 1
            continue
        m = _ESCAPE.match(inner, i)
        if m is None:
            return None
        byte, short, wide, plain = m.groups()
        if byte:
            code = int(byte, 16)
            out.append(chr(code if code < 0x80 else 0xDC00 + code))
        elif short or wide:
            code = int(short or wide, 16)
            if code > 0x10FFFF:
                return None
            out.append(chr(code))
        else:
            out.append(_NAMED_BACK[plain])
        i = m.end()
    return "".join(out)


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


# --- JSON as pages show it ----------------------------------------------------------------------

_JSON_SHORT = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def json_escape(c: str) -> str:
    """``c`` as a JSON string escape: ``\\n``, ``\\u0000``, ``\\u200b``, a pair of
    ``\\udXXX`` past U+FFFF."""
    if c in _JSON_SHORT:
        return _JSON_SHORT[c]
    code = ord(c)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _shows_escaped(c: str) -> bool:
    return UNSAFE.match(c) is not None or (not c.isascii() and _hidden(c))


def shown_json(value: Any, separators: tuple[str, str] = (", ", ": "), indent: int | None = None,
               sort_keys: bool = False) -> str:
    """A job's value (its arguments, its payload) as JSON text that reads as it is: what
    json.dumps writes raw past ASCII that shows as nothing or as another character (a
    zero-width space, a bidi override, a no-break space, a lone surrogate) written as its
    ``\\uXXXX`` escape, so the text is still JSON that reads back the same, and what the
    argument search matches (entries.Filter)."""
    text = json.dumps(value, ensure_ascii=False, default=str, separators=separators,
                      indent=indent, sort_keys=sort_keys)
    if text.isascii() and "\x7f" not in text:
        return text
    return "".join(json_escape(c) if _shows_escaped(c) else c for c in text)


def as_json_text(text: str) -> str:
    """Text typed to be found in such JSON: each character JSON (or shown_json) never writes
    raw there, a control, a zero-width space, written as its escape, so a search for
    ``y<NUL>z`` finds what the page shows as ``y\\u0000z``; quotes and backslashes stay as
    typed (they are JSON's own)."""
    if text.isprintable() and text.isascii():
        return text
    return "".join(json_escape(c) if _shows_escaped(c) else c for c in text)
