"""How each setting's value is read and checked: numbers, seconds, strings, paths, queues.

Every parser takes what YAML (or argparse) produced and returns the value the Config holds, or
raises ``Invalid`` with the complaint; the caller (settings.parse) names the file and the key.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from . import sentinel
from .errors import ConfigError
from .payload import MAX_SECONDS

REDIS_SCHEMES = ("redis", "rediss", "unix")


def error(message: str) -> ConfigError:
    """A one-line ConfigError (whitespace folded)."""
    return ConfigError(" ".join(message.split()))


class Invalid(ValueError):
    """A parser's complaint about one value; the caller prefixes the file and the key. A parser
    of a mapping names the sub-key at fault in ``sub`` (``ssl_params.ca_file``), and sets
    ``unknown`` when that sub-key is not one it knows (the message is then the known key it
    resembles, or empty)."""

    def __init__(self, message: str, sub: str = "", unknown: bool = False):
        super().__init__(message)
        self.sub, self.unknown = sub, unknown

    def within(self, key: str) -> Invalid:
        """The same complaint, one mapping further out."""
        return Invalid(str(self), f"{key}.{self.sub}" if self.sub else key, self.unknown)


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def expected(what: str, value: Any) -> Invalid:
    return Invalid(f"expected {what}, got {show(value)}")


def numeric(value: Any, what: str) -> float:
    # bool is an int in Python, but `concurrency: true` is a mistake, not 1.
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise expected(what, value) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(float(value) if abs(value) < 1e308 else math.inf):
        raise expected(what, value)  # (float() of a YAML integer of 400 digits overflows)
    return value


def integer(minimum: int) -> Callable[[Any], int]:
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"

    def parse(value: Any) -> int:
        number = numeric(value, what)
        if number != int(number) or number < minimum:
            raise expected(what, value)
        return int(number)
    return parse


def optional_integer(minimum: int) -> Callable[[Any], int | None]:
    """An integer >= minimum, or null/0 for "off"."""
    parse_int = integer(minimum)
    return lambda value: None if value is None or value == 0 else parse_int(value)


def seconds(minimum: float, *, above: bool = False) -> Callable[[Any], float]:
    """Seconds, at most payload.MAX_SECONDS (ten years: a job_timeout of 1e12 is past what
    setitimer takes, and every job of the daemon would fail on it)."""
    what = ("a positive number of seconds" if above and minimum == 0 else
            f"a number of seconds {'>' if above else '>='} {minimum:g}")

    def parse(value: Any) -> float:
        number = numeric(value, what)
        if number < minimum or (above and number == minimum):
            raise expected(what, value)
        if number > MAX_SECONDS:
            raise expected(f"at most {MAX_SECONDS} seconds (ten years)", value)
        return float(number)
    return parse


def optional_seconds(value: Any) -> float | None:
    # null and 0 both mean "no limit", however the operator prefers to write it.
    return None if value is None else seconds(0)(value) or None


def choice(*options: str) -> Callable[[Any], str]:
    what = " or ".join(options)

    def parse(value: Any) -> str:
        if value not in options:
            raise expected(what, value)
        return value
    return parse


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise expected("true or false", value)
    return value


def string(what: str, *, null: Any = None, forbid: Callable[[str], bool] = lambda c: c == "\0",
           empty: bool = False) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if value is None:
            return null
        if not isinstance(value, str) or (not value and not empty) or any(map(forbid, value)):
            raise expected(what, value)
        return value
    return parse


text = string("a string", null="", empty=True)
path = string("a path")
word = string("a non-empty string without whitespace",
              forbid=lambda c: c.isspace() or c == "\0")


def strings(value: Any) -> tuple[str, ...]:
    # Sidekiq accepts `require: app.rb` as well as a list.
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
        raise expected("a string or a list of strings", value)
    return tuple(items)


def redis_url(value: Any) -> str:
    what = "a redis://, rediss://, unix:// or redis+sentinel:// URL"
    if not isinstance(value, str):
        raise expected(what, value)
    if sentinel.is_sentinel_url(value):
        try:
            sentinel.parse(value)
        except ValueError as e:
            raise Invalid(str(e)) from None  # (not the URL: it may hold a password)
        return value
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        raise expected(what, value) from None
    if parts.scheme not in REDIS_SCHEMES or (parts.scheme == "unix" and not parts.path):
        raise expected(what, value)
    return value


QUEUE_ITEM = "a queue name, [name, weight] or 'name,weight'"


def queue_name(name: Any) -> str:
    # An unquoted `- :critical` is a Ruby Symbol to Sidekiq, which names queue "critical".
    if isinstance(name, str) and name.startswith(":"):
        name = name[1:]
    if not isinstance(name, str) or not name or any(c.isspace() or c in ",\0" for c in name):
        raise expected("a queue name (no spaces or commas)", name)
    return name


def queue_weight(name: str, weight: Any) -> int | None:
    if weight is None:
        return None
    try:
        return integer(0)(weight)
    except Invalid as exc:
        raise Invalid(f"queue '{name}': weight: {exc}") from None


def queue_item(item: Any) -> tuple[str, int | None]:
    # The same shapes as Sidekiq's `-q name,weight` and YAML `- [name, weight]`.
    parts = item.split(",") if isinstance(item, str) else item
    if not isinstance(parts, list) or not 1 <= len(parts) <= 2:
        raise expected(QUEUE_ITEM, item)
    name = queue_name(parts[0])
    return name, queue_weight(name, parts[1] if len(parts) == 2 else None)


def queues(value: Any) -> tuple[tuple[str, int | None], ...]:
    # A weight of None means "given as a plain name"; _build turns it into 1 and uses it to
    # tell strict order from weighted, which a bare (name, 1) could not.
    if value is None:
        return ()
    if not isinstance(value, list):
        raise expected("a list of queues", value)
    seen: dict[str, int | None] = {}
    for name, weight in map(queue_item, value):
        if name in seen:
            raise Invalid(f"{name} cannot be defined twice")
        seen[name] = weight
    return tuple(seen.items())


HOST_PORT = "HOST:PORT (such as 127.0.0.1:9394 or [::1]:9394)"


def host_port(value: Any) -> tuple[str, int] | None:
    """An address to listen on, host required (a server binds only where it is told)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise expected(HOST_PORT, value)
    host, sep, port = value.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or any(c.isspace() or c in "[]/" for c in host) \
            or not port.isdigit() or not 0 < int(port) < 65536:
        raise expected(HOST_PORT, value)
    return host, int(port)
