"""Strict job arguments, as Sidekiq 7's ``strict_args!``: a push refuses arguments that JSON
would not give back as they are ({1: 2} read back is {"1": 2}, a tuple is a list, an IntEnum an
int), naming the value's place, instead of the job finding out in production. The check runs
in the client's normalize (where Sidekiq's verify_json is), before client middleware, and looks
only at "args", as Sidekiq's does; ``strict_args()`` sets the mode for the process.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import reprlib
import sys
import warnings
from collections.abc import Mapping
from itertools import chain
from typing import Any, Iterable, Iterator, NamedTuple

from .errors import JobArgumentsError
from .payload import dumps

_STRICT_MODES = ("raise", "warn", None)
_strict_mode: str | None = "raise"


class ArgumentsWarning(UserWarning):
    """Pushed arguments JSON changes (``strict_args("warn")``). Python shows one per place in
    the code that pushes; ``logging.captureWarnings(True)`` sends them to the log."""


def strict_args(mode: str | bool | None = "raise") -> str | None:
    """How pushes treat arguments JSON would not give back unchanged, for the whole process;
    returns the mode that was in force. Like Sidekiq 7's ``Sidekiq.strict_args!(mode)``:

    - ``"raise"`` (the default, also ``True``): ``JobArgumentsError`` naming the value's place;
    - ``"warn"``: push them as JSON writes them, with an ``ArgumentsWarning``;
    - ``False`` (or ``None``): push without looking.

    Values JSON cannot write at all (a datetime, a set, bytes, NaN) fail in every mode: with
    "raise" and "warn" a ``JobArgumentsError`` names their place, with False json's own
    TypeError or ValueError does not. A switch for the process, not per client or per class:
    set it once where the application starts, as Sidekiq's initializer does."""
    global _strict_mode
    if mode is True:
        mode = "raise"
    elif mode is False:
        mode = None
    if mode not in _STRICT_MODES:
        raise ValueError(f'strict_args takes "raise", "warn" or False, not {mode!r}')
    previous, _strict_mode = _strict_mode, mode
    return previous


def check_args(msg: Mapping, args: list | None = None) -> None:
    """Apply the strict_args mode to the arguments of the push of ``msg`` (its ``args``, or
    ``args`` if given: a bulk push's list of argument lists, where ``args[2][0]`` is the first
    argument of the third job)."""
    if args is None:
        args = msg["args"]
    if _strict_mode is not None and not plainly_json(args):
        job = msg.get("wrapped") or msg["class"]
        _refuse(job, unsafe_values(args, "args"), "Job arguments")


def check_json(owner: str, value: Any, path: str) -> None:
    """check_args for a payload value of the caller's own (``Job.set(extra=...)``)."""
    if _strict_mode is not None and not plainly_json([value]):
        _refuse(owner, unsafe_values(value, path), "Payload values")


def _refuse(owner: str, found: Iterable[Unsafe], what: str) -> None:
    """Raise (or, in "warn" mode, warn) about the values ``found`` that JSON changes; values
    it cannot write at all are an error in every mode."""
    plain = (f"{what} must be plain JSON: str, int, float, bool, None, lists, and dicts with "
             "str keys")
    changed = None
    for unsafe in found:
        if unsafe.fatal:
            raise JobArgumentsError(f"{owner} {unsafe}. {plain}")
        if _strict_mode == "raise":
            raise JobArgumentsError(f"{owner} {unsafe}. {plain} ({_RELAX})")
        if changed is None:
            changed = unsafe
    if changed is not None:
        warnings.warn(f"{owner} {changed}. {plain}", ArgumentsWarning, stacklevel=_callers_level())


_RELAX = ('queued.strict_args("warn") or queued.strict_args(False) lets such values through '
          'as JSON writes them')


def _callers_level() -> int:
    """The stacklevel of the first frame outside queued, so a warning names the caller's line
    (Python 3.12's skip_file_prefixes does this; 3.10 and 3.11 have no such thing)."""
    level, frame = 1, sys._getframe(1)
    package = __name__.rpartition(".")[0] + "."
    while frame is not None and (frame.f_globals.get("__name__") or "").startswith(package):
        level += 1
        frame = frame.f_back
    return level


# --- finding the values JSON would change
#
# A job's arguments are written as JSON and read back from it by the worker. Some Python values
# do not survive that: {1: 2} comes back as {"1": 2}, a tuple as a list, an IntEnum as a plain
# int; a datetime, a set or bytes cannot be written at all. plainly_json() answers the common
# case (nothing of the sort anywhere) fast; unsafe_values() then finds the value and says why.

#: The types JSON gives back as they went in (exact types: a subclass comes back as its base).
_JSON_TYPES = frozenset({str, int, float, bool, type(None), list, dict})
#: Up to this many values, plainly_json() loops over them in Python; more (a bulk push's
#: argument lists), a level of nesting at a time in C. Each is the faster for its size.
_FEW = 16
#: Deeper than this, plainly_json() leaves the answer to unsafe_values(), which finds cycles.
_MAX_LEVELS = 100
# isinstance as one-argument C functions, for filter() and map(): no lambda call per value.
_is_float, _is_list, _is_dict, _is_str = (float.__instancecheck__, list.__instancecheck__,
                                          dict.__instancecheck__, str.__instancecheck__)


def plainly_json(values: list) -> bool:
    """True when every value in ``values``, at any depth, is a str, int, bool, None, finite
    float, list, or dict with str keys: JSON gives such values back unchanged. False means
    "look closer": unsafe_values() says what and where. Dict keys may be str subclasses, as
    Sidekiq's check allows (JSON gives back the same text as a key)."""
    try:
        return _plain_few(values) if len(values) <= _FEW else _plain_levels(values)
    except RecursionError:  # nested past Python's limit, or a list that holds itself
        return False


def _plain_few(values: Any) -> bool:
    """plainly_json for a push's few arguments: one pass, ``continue`` for the common types."""
    for v in values:
        kind = type(v)
        if kind is str or kind is int or kind is bool or v is None:
            continue
        if kind is float:
            if v - v != 0.0:  # inf - inf and nan - nan are nan
                return False
        elif kind is list:
            if not _plain_few(v):
                return False
        elif kind is dict:
            if not (all(map(_is_str, v)) and _plain_few(v.values())):
                return False
        else:
            return False
    return True


def _plain_levels(values: list) -> bool:
    """plainly_json for many values (a bulk push's argument lists): a level of nesting at a
    time, with loops that run in C (the set of the level's types; the next level chained out
    of its lists and dicts), a few tens of nanoseconds a value where a Python loop costs
    several times that."""
    level = values
    for _ in range(_MAX_LEVELS):
        types = set(map(type, level))
        if not types <= _JSON_TYPES:
            return False
        if float in types and not all(map(math.isfinite, filter(_is_float, level))):
            return False
        has_list, has_dict = list in types, dict in types
        if not has_list and not has_dict:
            return True
        inner: list = []
        if has_dict:
            dicts = level if len(types) == 1 else list(filter(_is_dict, level))
            try:
                "".join(chain.from_iterable(dicts))  # the keys: a TypeError unless all str
            except TypeError:
                return False
            inner.extend(chain.from_iterable(map(dict.values, dicts)))
        if has_list:
            inner.extend(chain.from_iterable(level if len(types) == 1
                                             else filter(_is_list, level)))
        level = inner
    return False


class Unsafe(NamedTuple):
    """A value JSON would not give back as it is: where, what, why, and whether JSON cannot
    write it at all (``fatal``) or would write something else (a list for a tuple)."""
    path: str
    value: Any
    reason: str
    fatal: bool

    def __str__(self) -> str:
        return f"{self.path}: {_short_repr(self.value)}: {self.reason}"


_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60


def _short_repr(value: Any) -> str:
    return _repr.repr(value)


def unsafe_values(value: Any, path: str = "args") -> Iterator[Unsafe]:
    """Every value in ``value`` (named ``path``) that would not come back from JSON as it
    is, depth first, in order."""
    return _walk(value, path, set())


def _walk(value: Any, path: str, open_ids: set) -> Iterator[Unsafe]:
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        yield Unsafe(path, value, "JSON has no NaN or Infinity", True)
        return
    if kind is not float and kind is not list and kind is not dict:
        reason, fatal = _why_not_json(value)
        yield Unsafe(path, value, reason, fatal)
    if isinstance(value, (list, tuple, dict)):  # its contents may hold more
        if id(value) in open_ids:  # json.dumps raises "Circular reference detected"
            yield Unsafe(path, value, "it contains itself: JSON cannot write it", True)
            return
        open_ids.add(id(value))
        if isinstance(value, dict):
            yield from _walk_dict(value, path, open_ids)
        else:
            for i, item in enumerate(value):
                yield from _walk(item, f"{path}[{i}]", open_ids)
        open_ids.discard(id(value))


def _walk_dict(value: dict, path: str, open_ids: set) -> Iterator[Unsafe]:
    for key, item in value.items():
        if not isinstance(key, str):
            yield _unsafe_key(value, key, path)
        shown = dumps(key) if isinstance(key, str) else repr(key)
        yield from _walk(item, f"{path}[{shown}]", open_ids)


def _unsafe_key(owner: dict, key: Any, path: str) -> Unsafe:
    what = f"a dict key {key!r} ({type(key).__name__}) is not a string"
    if isinstance(key, (str, int, float)) or key is None:  # bool is an int
        # json.dumps writes these keys as strings (1 -> "1", True -> "true", None -> "null")
        written = next(iter(json.loads(json.dumps({key: 0}))))
        return Unsafe(path, owner, f"{what}: JSON would turn it into {dumps(written)}", False)
    return Unsafe(path, owner, f"{what}: JSON cannot write it", True)


def _why_not_json(value: Any) -> tuple[str, bool]:
    """(why ``value``, of a type other than str/int/float/bool/None/list/dict, is not JSON,
    whether JSON cannot write it at all)."""
    kind = type(value).__name__
    if type(value) is tuple:
        return "a tuple: JSON would turn it into a list", False
    for base, back in ((int, "int"), (float, "float"), (str, "str"), (list, "list"),
                       (tuple, "list"), (dict, "dict")):
        if isinstance(value, base):  # enums, namedtuples, OrderedDict, defaultdict, ...
            return (f"{kind} is a subclass of {base.__name__}: JSON would give it back as a "
                    f"plain {back}"), False
    if isinstance(value, (set, frozenset)):
        return f"{kind} is not a JSON type: pass a list", True
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{kind} is not a JSON type: pass a str (decoded, or base64)", True
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        epoch = " or an epoch (.timestamp())" if isinstance(value, _dt.datetime) else ""
        return f"{kind} is not a JSON type: pass a str (.isoformat()){epoch}", True
    if isinstance(value, decimal.Decimal):
        return f"{kind} is not a JSON type: pass a str (exact) or a float", True
    return f"{kind} is not a JSON type", True
