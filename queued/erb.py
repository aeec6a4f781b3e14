"""ERB in sidekiq.yml: the few forms Rails apps write there, evaluated without Ruby.

Sidekiq runs its config file through ERB before YAML, so real files say
``:concurrency: <%= ENV.fetch("SIDEKIQ_CONCURRENCY", 3) %>``. queued cannot run Ruby and must
never run code from a config file, so it reads the expressions people actually write there and
evaluates them itself, with Ruby's meaning:

    ENV["X"]  ENV['X']                    the variable, or nil
    ENV.fetch("X")                        the variable; an error naming it when it is not set
    ENV.fetch("X", default)               the variable, or the default
    ENV.fetch("X") { default }            the same (the block form)
    a || b                                a unless it is nil or false (an empty string is true)
    .to_i  .to_f  .to_s                   Ruby's conversions (nil.to_i is 0, "12abc".to_i is 12)
    Integer(x)  Float(x)                  strict conversions (an error on "abc")
    "text"  'text'  3  -1.5  true  false  nil

``<%= expr %>`` is replaced by the value's ``to_s`` (``-%>`` also eats the newline after it),
``<%# ... %>`` is a comment and ``<%%`` a literal ``<%``. Anything else (``<% if ... %>`` blocks,
other methods, other constants) is refused with its line and this list, never guessed at.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: How the refusal names what is supported.
SUPPORTED = ('ENV["X"], ENV.fetch("X"), ENV.fetch("X", default), ENV.fetch("X") { default }, '
             'a || b, .to_i/.to_f/.to_s, Integer(x), Float(x), and literals '
             '("text", 3, 1.5, true, false, nil)')

_TAG = re.compile(r"<%%|<%(=|#|-)?(.*?)(-?)%>", re.S)
_TOKEN = re.compile(r"""\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<num>-?\d[\d_]*(?:\.\d[\d_]*)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*[?!]?)
  | (?P<op>\|\||[\[\](){}.,])
)""", re.X)
_RUBY_INT = re.compile(r"\s*([+-]?\d[\d_]*)")
_RUBY_FLOAT = re.compile(r"\s*([+-]?\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)")


class ErbError(ValueError):
    """A tag queued does not evaluate, or one that failed (ENV.fetch of an unset variable)."""


def render(text: str, environ: Mapping[str, str]) -> str:
    """``text`` with every ERB tag evaluated. Raises ErbError with the tag's line number."""
    out, pos = [], 0
    while (m := _TAG.search(text, pos)) is not None:
        out.append(text[pos:m.start()])
        pos = m.end()
        if m.group(0) == "<%%":  # a literal <%
            out.append("<%")
            continue
        kind, body, trim = m.group(1), m.group(2), m.group(3)
        line = text.count("\n", 0, m.start()) + 1
        if kind == "=":
            try:
                out.append(_to_s(_Parser(body, environ).parse()))
            except ErbError as e:
                raise ErbError(f"line {line}: <%={body}{trim}%>: {e}") from None
        elif kind != "#":
            raise ErbError(f"line {line}: <%{kind or ''}{body}{trim}%>: only <%= expression %> "
                           f"tags are evaluated (no Ruby code runs here); supported: {SUPPORTED}")
        if trim and text.startswith("\n", pos):
            pos += 1
    out.append(text[pos:])
    return "".join(out)


class _Parser:
    """A recursive descent over one expression: ``or := call ('||' call)*``,
    ``call := primary ('.' method)*``."""

    def __init__(self, source: str, environ: Mapping[str, str]):
        self.environ = environ
        self.tokens = _tokens(source)
        self.i = 0

    def parse(self) -> Any:
        value = self._or()
        if self.i != len(self.tokens):
            raise self._unsupported(f"unexpected {self.tokens[self.i][1]!r}")
        return value

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _take(self, text: str | None = None, kind: str | None = None) -> str:
        tok = self._peek()
        if tok is None or (text is not None and tok[1] != text) or (kind and tok[0] != kind):
            want = repr(text) if text else (kind or "more")
            got = repr(tok[1]) if tok else "the end"
            raise self._unsupported(f"expected {want}, found {got}")
        self.i += 1
        return tok[1]

    def _unsupported(self, why: str) -> ErbError:
        return ErbError(f"{why}; supported: {SUPPORTED}")

    def _or(self) -> Any:
        value = self._call()
        while self._peek() == ("op", "||"):
            self.i += 1
            right = self._call()
            if value is None or value is False:
                value = right
        return value

    def _call(self) -> Any:
        value = self._primary()
        while self._peek() == ("op", "."):
            self.i += 1
            method = self._take(kind="name")
            if method not in _METHODS:
                raise self._unsupported(f"method .{method}")
            value = _METHODS[method](value)
        return value

    def _primary(self) -> Any:
        tok = self._peek()
        if tok is None:
            raise self._unsupported("an empty expression")
        kind, text = tok
        self.i += 1
        if kind == "str":
            return _unquote(text)
        if kind == "num":
            clean = text.replace("_", "")
            return float(clean) if "." in clean else int(clean)
        if kind == "op" and text == "(":
            value = self._or()
            self._take(")")
            return value
        if kind == "name":
            return self._named(text)
        raise self._unsupported(f"unexpected {text!r}")

    def _named(self, name: str) -> Any:
        if name in _LITERALS:
            return _LITERALS[name]
        if name in ("Integer", "Float"):
            self._take("(")
            value = self._or()
            self._take(")")
            return _strict(name, value)
        if name != "ENV":
            raise self._unsupported(f"{name} is not something queued evaluates")
        if self._peek() == ("op", "["):
            self.i += 1
            var = self._string()
            self._take("]")
            return self.environ.get(var)
        self._take(".")
        method = self._take(kind="name")
        if method != "fetch":
            raise self._unsupported(f"ENV.{method}")
        return self._fetch()

    def _fetch(self) -> Any:
        self._take("(")
        var = self._string()
        default, has_default = None, False
        if self._peek() == ("op", ","):
            self.i += 1
            default, has_default = self._or(), True
        self._take(")")
        if self._peek() == ("op", "{"):
            self.i += 1
            default, has_default = self._or(), True
            self._take("}")
        if var in self.environ:
            return self.environ[var]
        if not has_default:
            raise ErbError(f"the environment variable {var} is not set (ENV.fetch without a "
                           "default needs it)")
        return default

    def _string(self) -> str:
        tok = self._peek()
        if tok is None or tok[0] != "str":
            raise self._unsupported("a variable name must be a quoted string")
        self.i += 1
        return _unquote(tok[1])


def _tokens(source: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    source = source.rstrip()
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None or m.end() == pos:
            rest = source[pos:].strip()
            raise ErbError(f"cannot read {rest[:20]!r}; supported: {SUPPORTED}")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


def _unquote(text: str) -> str:
    body = text[1:-1]
    if text[0] == "'":  # Ruby's single quotes escape only \\ and \'
        return body.replace("\\\\", "\0").replace("\\'", "'").replace("\0", "\\")
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def _to_i(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ErbError(f"{str(value).lower()}.to_i: no such method in Ruby")
    if isinstance(value, (int, float)):
        return int(value)
    m = _RUBY_INT.match(value)
    return int(m.group(1).replace("_", "")) if m else 0


def _to_f(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        raise ErbError(f"{str(value).lower()}.to_f: no such method in Ruby")
    if isinstance(value, (int, float)):
        return float(value)
    m = _RUBY_FLOAT.match(value)
    return float(m.group(1).replace("_", "")) if m else 0.0


def _to_s(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)  # (Python's float text is Ruby's for the values a config holds: 1.5, 2.0)


def _strict(name: str, value: Any) -> int | float:
    """Ruby's Integer()/Float(): the whole string must be a number."""
    text = value.strip().replace("_", "") if isinstance(value, str) else value
    try:
        if isinstance(text, bool) or text is None:
            raise ValueError
        return int(text) if name == "Integer" else float(text)
    except (TypeError, ValueError):
        raise ErbError(f"{name}({_to_s(value)!r}): not a valid number") from None


_METHODS = {"to_i": _to_i, "to_f": _to_f, "to_s": _to_s}
_LITERALS = {"true": True, "false": False, "nil": None}
