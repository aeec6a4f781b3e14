"""The one immutable Config: defaults < YAML file (plus its environment section) < command line.

This module owns every setting queued has: its name, default, parser/validator and help text
live in one line of the ``Config`` class body, and everything else (file keys, aliases,
``describe()``, error messages) is derived from that table. Bad input is stopped here with a
one-line ``ConfigError`` naming the file and the key, so nothing past ``load()`` ever has to
re-check a setting.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import yaml

from queued.errors import ConfigError

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
CLI_SOURCE = "command line"
# Sidekiq's order of precedence; with none of them set Sidekiq says "development", and so do
# we when choosing a file section (Config.environment itself stays None).
ENVIRONMENT_VARS = ("APP_ENV", "RAILS_ENV", "RACK_ENV")
DEFAULT_SECTION = "development"
REDIS_SCHEMES = ("redis", "rediss", "unix")


class _Invalid(ValueError):
    """A parser's complaint about one value; the caller prefixes the file and the key."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _expected(what: str, value: Any) -> _Invalid:
    return _Invalid(f"expected {what}, got {_show(value)}")


# --- value parsers: each takes what YAML (or argparse) produced and returns the field value.

def _number(value: Any, what: str) -> float:
    # bool is an int in Python, but `concurrency: true` is a mistake, not 1.
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _expected(what, value) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _expected(what, value)
    return value


def _integer(minimum: int) -> Callable[[Any], int]:
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"

    def parse(value: Any) -> int:
        number = _number(value, what)
        if number != int(number) or number < minimum:
            raise _expected(what, value)
        return int(number)
    return parse


def _seconds(minimum: float, *, above: bool = False) -> Callable[[Any], float]:
    what = ("a positive number of seconds" if above and minimum == 0 else
            f"a number of seconds {'>' if above else '>='} {minimum:g}")

    def parse(value: Any) -> float:
        number = _number(value, what)
        if number < minimum or (above and number == minimum):
            raise _expected(what, value)
        return float(number)
    return parse


def _optional_seconds(value: Any) -> float | None:
    # null and 0 both mean "no limit", however the operator prefers to write it.
    return None if value is None else _seconds(0)(value) or None


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _expected("true or false", value)
    return value


def _string(what: str, *, null: Any = None, forbid: Callable[[str], bool] = lambda c: c == "\0",
            empty: bool = False) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if value is None:
            return null
        if not isinstance(value, str) or (not value and not empty) or any(map(forbid, value)):
            raise _expected(what, value)
        return value
    return parse


_text = _string("a string", null="", empty=True)
_path = _string("a path")
_word = _string("a non-empty string without whitespace",
                forbid=lambda c: c.isspace() or c == "\0")


def _strings(value: Any) -> tuple[str, ...]:
    # Sidekiq accepts `require: app.rb` as well as a list.
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
        raise _expected("a string or a list of strings", value)
    return tuple(items)


def _redis_url(value: Any) -> str:
    what = "a redis://, rediss:// or unix:// URL"
    if not isinstance(value, str):
        raise _expected(what, value)
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        raise _expected(what, value) from None
    if parts.scheme not in REDIS_SCHEMES or (parts.scheme == "unix" and not parts.path):
        raise _expected(what, value)
    return value


QUEUE_ITEM = "a queue name, [name, weight] or 'name,weight'"


def _queue_name(name: Any) -> str:
    # An unquoted `- :critical` is a Ruby Symbol to Sidekiq, which names queue "critical".
    if isinstance(name, str) and name.startswith(":"):
        name = name[1:]
    if not isinstance(name, str) or not name or any(c.isspace() or c in ",\0" for c in name):
        raise _expected("a queue name (no spaces or commas)", name)
    return name


def _queue_weight(name: str, weight: Any) -> int | None:
    if weight is None:
        return None
    try:
        return _integer(0)(weight)
    except _Invalid as exc:
        raise _Invalid(f"queue '{name}': weight: {exc}") from None


def _queue_item(item: Any) -> tuple[str, int | None]:
    # The same shapes as Sidekiq's `-q name,weight` and YAML `- [name, weight]`.
    parts = item.split(",") if isinstance(item, str) else item
    if not isinstance(parts, list) or not 1 <= len(parts) <= 2:
        raise _expected(QUEUE_ITEM, item)
    name = _queue_name(parts[0])
    return name, _queue_weight(name, parts[1] if len(parts) == 2 else None)


def _queues(value: Any) -> tuple[tuple[str, int | None], ...]:
    # A weight of None means "given as a plain name"; _build turns it into 1 and uses it to
    # tell strict order from weighted, which a bare (name, 1) could not.
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _expected("a list of queues", value)
    seen: dict[str, int | None] = {}
    for name, weight in map(_queue_item, value):
        if name in seen:
            raise _Invalid(f"{name} cannot be defined twice")
        seen[name] = weight
    return tuple(seen.items())


# --- the settings table

@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    parse: Callable[[Any], Any]
    help: str
    aliases: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()       # command-line spelling, for the parser and for errors
    not_in_file: str | None = None    # why the file may not set it, when it may not


def _s(default: Any, parse: Callable[[Any], Any], help: str, **extra: Any) -> Any:
    return dataclasses.field(default=default, metadata={"parse": parse, "help": help, **extra})


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """Every setting of one queued process. Build it with ``load()`` or ``from_dict()``."""

    config_file: str | None = _s(None, _path, "Read settings from this YAML file (sidekiq.yml).",
                                 flags=("-C", "--config"), not_in_file="use -C")
    environment: str | None = _s(None, _word, "Environment section of the file to use "
                                 "(else $APP_ENV, $RAILS_ENV, $RACK_ENV).",
                                 flags=("-e", "--environment"),
                                 not_in_file="use -e or APP_ENV/RAILS_ENV/RACK_ENV")
    concurrency: int = _s(os.cpu_count() or 2, _integer(1), "Number of worker processes.",
                          flags=("-c", "--concurrency"))
    queues: tuple[tuple[str, int], ...] = _s(
        (("default", 1),), _queues, "Queues to fetch from, as names (strict order) or "
        "[name, weight] (weighted random).", flags=("-q", "--queue"))
    strict: bool = _s(True, _boolean, "Strict queue order: true unless a queue has a weight > 0.",
                      not_in_file="it follows from the queue weights")
    shutdown_timeout: float = _s(25.0, _seconds(0, above=True),
                                 "Seconds a graceful stop waits for running jobs.",
                                 aliases=("timeout",), flags=("-t", "--timeout"))
    verbose: bool = _s(False, _boolean, "Log at DEBUG level.", flags=("-v", "--verbose"))
    tag: str = _s("", _text, "Shown in the process title and the Web UI.", flags=("-g", "--tag"))
    labels: tuple[str, ...] = _s((), _strings, "Extra labels shown in the Web UI.")
    require: tuple[str, ...] = _s((), _strings, "Python modules or files that define the jobs.",
                                  flags=("-r", "--require"))
    redis_url: str = _s(DEFAULT_REDIS_URL, _redis_url, "Redis to use (else $REDIS_URL).")
    namespace: str | None = _s(None, _word, "Prefix for every Redis key (redis-namespace style).")
    embedded_redis: str | None = _s(None, _path, "Run our own redis-server with its data in this "
                                    "directory (relative to the config file).")
    job_timeout: float | None = _s(None, _optional_seconds,
                                   "Default job time limit in seconds (0 or null: none).")
    timeout_grace: float = _s(5.0, _seconds(0),
                              "Seconds past a job's timeout before the master kills its worker.")
    lease_timeout: float = _s(30.0, _seconds(2), "Seconds a reservation lives without renewal.")
    prefetch: int = _s(8, _integer(1),
                       "Most jobs a worker reserves in one round trip while jobs are short.")
    max_payload_bytes: int = _s(64 * 2**20, _integer(1),
                                "Largest job payload a worker runs; larger ones go to dead.")
    max_retries: int = _s(25, _integer(0), "Retries for a job that does not set its own.")
    dead_max_jobs: int = _s(10000, _integer(0), "Most jobs kept in the dead set.")
    dead_timeout_in_seconds: int = _s(15552000, _integer(0),
                                      "Age in seconds after which dead jobs are trimmed.")
    max_crashes: int = _s(3, _integer(1),
                          "Times a job may kill its worker before it goes to dead.")
    scheduler_poll_interval: float = _s(0.05, _seconds(0, above=True),
                                        "How often the scheduler leader checks schedule and retry.")
    poll_interval_average: float = _s(5.0, _seconds(0, above=True),
                                      "Backstop poll interval of the non-leader processes.",
                                      aliases=("average_scheduled_poll_interval",))
    heartbeat_interval: float = _s(5.0, _seconds(0, above=True),
                                   "Seconds between process heartbeats.")
    fetch_timeout: float = _s(2.0, _seconds(0, above=True),
                              "Seconds an idle worker blocks in Redis before looking around.")
    job_logging: bool = _s(True, _boolean, "Log one line at the end of every job.")
    pidfile: str | None = _s(None, _path, "Write the master's pid here (Sidekiq 5 key).")
    logfile: str | None = _s(None, _path, "Log here instead of stderr (Sidekiq 5 key).")

    @property
    def queue_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for name, _ in self.queues))

    @property
    def weighted_queues(self) -> tuple[str, ...]:
        """Sidekiq's expansion: each name repeated max(weight, 1) times, for random choice."""
        return tuple(name for name, weight in self.queues for _ in range(max(weight, 1)))

    @property
    def log_level(self) -> str:
        return "DEBUG" if self.verbose else "INFO"


SETTINGS: dict[str, Setting] = {
    f.name: Setting(f.name, f.default, **f.metadata) for f in dataclasses.fields(Config)}
ALIASES: dict[str, str] = {a: s.name for s in SETTINGS.values() for a in s.aliases}


def describe() -> list[tuple[str, Any, str]]:
    """(name, default, help) for every setting, in table order, for docs and --help text."""
    return [(s.name, s.default, s.help) for s in SETTINGS.values()]


# --- command line

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queued",
                                     description="Run Sidekiq-format jobs from Redis.")

    def add(name: str, **kwargs: Any) -> None:
        setting = SETTINGS[name]
        parser.add_argument(*setting.flags, dest=name, help=setting.help, **kwargs)

    add("config_file", metavar="FILE")
    add("concurrency", type=int, metavar="N")
    add("queues", action="append", metavar="QUEUE[,WEIGHT]")
    add("require", action="append", metavar="MODULE_OR_FILE")
    add("shutdown_timeout", type=float, metavar="SECONDS")
    add("environment", metavar="ENV")
    add("tag", metavar="TAG")
    add("verbose", action="store_true", default=None)
    parser.add_argument("-V", "--version", action="store_true", help="Print the version and exit.")
    return parser


def _cli_values(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, parsed like file values (CLI lists replace)."""
    values = {}
    for name in ("concurrency", "queues", "require", "shutdown_timeout", "environment", "tag",
                 "verbose"):
        value = getattr(args, name, None)
        if value is not None:
            setting = SETTINGS[name]
            values[name] = _parse(setting, value, CLI_SOURCE, "/".join(setting.flags))
    return values


# --- the file

def _read_yaml(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(f"{path}: cannot read config file: "
                     f"{getattr(exc, 'strerror', None) or exc}") from None
    if "<%" in text:
        line = text[:text.index("<%")].count("\n") + 1
        raise _error(f"{path}: line {line}: ERB (<% ... %>) is not supported; use a plain value")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or exc
        raise _error(f"{path}: {where}invalid YAML: {problem}") from None


def _key(key: Any, source: str, where: str) -> str:
    # Sidekiq files write `:concurrency:`, which YAML reads as the string ":concurrency".
    if not isinstance(key, str):
        raise _error(f"{source}: unknown key {where}{_show(key)}")
    return key[1:] if key.startswith(":") else key


def _unknown(source: str, where: str, key: str) -> ConfigError:
    names = [name for name, s in SETTINGS.items() if not s.not_in_file] + list(ALIASES)
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return _error(f"{source}: unknown key '{where}{key}'{hint}")


def _parse(setting: Setting, value: Any, source: str, label: str) -> Any:
    try:
        return setting.parse(value)
    except _Invalid as exc:
        raise _error(f"{source}: {label}: {exc}") from None


def _normalized(mapping: Mapping, source: str, where: str) -> dict[str, tuple[str, Any]]:
    """{setting or section name: (key as written, value)}, refusing a key given twice."""
    out: dict[str, tuple[str, Any]] = {}
    written: dict[str, str] = {}
    for raw_key, value in mapping.items():
        key = _key(raw_key, source, where)
        name = ALIASES.get(key, key)
        if name in out:
            raise _error(f"{source}: {where}{key}: given twice "
                         f"(as '{written[name]}' and '{raw_key}')")
        out[name], written[name] = (key, value), raw_key
    return out


def _file_level(mapping: Mapping, source: str, where: str = "",
                sections: dict[str, Mapping] | None = None) -> dict[str, Any]:
    """Parse one mapping of the file. Unknown mapping-valued keys go to ``sections`` if given."""
    values: dict[str, Any] = {}
    for name, (key, value) in _normalized(mapping, source, where).items():
        setting = SETTINGS.get(name)
        if setting is None and sections is not None and isinstance(value, Mapping):
            sections[name] = value
        elif setting is None:
            raise _unknown(source, where, key)
        elif setting.not_in_file:
            raise _error(f"{source}: {where}{key}: not a config file setting "
                         f"({setting.not_in_file})")
        else:
            values[name] = _parse(setting, value, source, where + key)
    return values


def _file_values(data: Any, source: str, environment: str | None) -> dict[str, Any]:
    """The top level with the chosen environment section merged over it, as Sidekiq does
    (``opts.merge(opts.delete(env))``); the other sections are not looked at."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise _error(f"{source}: expected a mapping of settings at the top level, "
                     f"got {type(data).__name__}")
    sections: dict[str, Mapping] = {}
    values = _file_level(data, source, sections=sections)
    env = environment or DEFAULT_SECTION
    if env in sections:
        values.update(_file_level(sections[env], source, where=f"{env}."))
    return values


# --- putting it together

def _error(message: str) -> ConfigError:
    return ConfigError(" ".join(message.split()))


def _environment(environ: Mapping[str, str]) -> str | None:
    return next((environ[v] for v in ENVIRONMENT_VARS if environ.get(v)), None)


def _redis_from_env(environ: Mapping[str, str]) -> str:
    url = environ.get("REDIS_URL")
    if not url:
        return DEFAULT_REDIS_URL
    return _parse(SETTINGS["redis_url"], url, "environment", "REDIS_URL")


def _build(data: Any, source: str, base_dir: str, cli: dict[str, Any],
           environ: Mapping[str, str], config_file: str | None) -> Config:
    environment = cli.pop("environment", None) or _environment(environ)
    values = _file_values(data, source, environment)
    if "embedded_redis" in values and "redis_url" in values:
        raise _error(f"{source}: embedded_redis: cannot be set together with redis_url "
                     "(queued starts its own Redis)")
    values.update(cli)
    if "redis_url" not in values:
        values["redis_url"] = _redis_from_env(environ)
    if values.get("embedded_redis"):
        path = os.path.join(base_dir, values["embedded_redis"])
        values["embedded_redis"] = os.path.normpath(path)
    _check_lease(values, source)
    spec = values.pop("queues", ()) or (("default", None),)
    # Sidekiq's parse_queue: strict unless some queue has an explicit weight > 0.
    strict = not any(weight for _, weight in spec)
    queues = tuple((name, 1 if weight is None else weight) for name, weight in spec)
    return Config(config_file=config_file, environment=environment, queues=queues, strict=strict,
                  **values)


def _check_lease(values: dict[str, Any], source: str) -> None:
    # Each heartbeat renews the master's lease for lease_timeout. With heartbeat_interval at
    # or above it, the lease lapsed between beats and two healthy masters reaped each other's
    # running jobs (a 5 s job ran twice). Half leaves room for one late beat.
    beat, lease = (values.get(name, SETTINGS[name].default)
                   for name in ("heartbeat_interval", "lease_timeout"))
    if beat * 2 > lease:
        raise _error(f"{source}: heartbeat_interval ({beat:g}s) must be at most half of "
                     f"lease_timeout ({lease:g}s): each beat renews the lease, and a lease that "
                     f"lapses between beats lets other masters take back running jobs")


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Config:
    """Build the Config from already-parsed arguments (so a caller can check -V first)."""
    environ = os.environ if environ is None else environ
    cli = _cli_values(args)
    path = args.config_file
    if path is None:
        return _build(None, CLI_SOURCE, os.getcwd(), cli, environ, None)
    base_dir = os.path.dirname(os.path.abspath(path))
    return _build(_read_yaml(path), path, base_dir, cli, environ, path)


def load(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Parse argv (default sys.argv[1:]), read the -C file, merge, validate."""
    return from_args(build_parser().parse_args(argv), environ)


def from_dict(data: Mapping, *, source: str = "<dict>",
              environ: Mapping[str, str] | None = None) -> Config:
    """Validate a mapping written in the file dialect, as if it were a file named ``source``."""
    environ = os.environ if environ is None else environ
    return _build(data, source, os.getcwd(), {}, environ, None)
