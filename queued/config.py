"""The one immutable Config: defaults < YAML file (plus its environment section) < command line
(and for the Redis URL: defaults < file < ``REDIS_URL`` < ``--redis-url``).

This module owns every setting queued has: its name, default, parser/validator and help text
live in one line of the ``Config`` class body, and everything else (file keys, aliases,
``describe()``, error messages) is derived from that table. Bad input is stopped here with a
one-line ``ConfigError`` naming the file and the key, so nothing past ``load()`` ever has to
re-check a setting. Nothing in the file is dropped without a word: a key is a setting, the
selected environment section or another valid one, or an error.

Paths (``require``, ``pidfile``, ``logfile``, ``embedded_redis``) resolve against the working
directory, as Sidekiq's do, never against the config file's folder.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import yaml

from queued.errors import ConfigError

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: Read when no -C is given and it exists, as Sidekiq does (relative to the working directory).
DEFAULT_CONFIG_FILE = os.path.join("config", "sidekiq.yml")
CLI_SOURCE = "command line"
# Sidekiq's order of precedence; with none of them set Sidekiq says "development", and so do
# we when choosing a file section (Config.environment itself stays None).
ENVIRONMENT_VARS = ("APP_ENV", "RAILS_ENV", "RACK_ENV")
DEFAULT_SECTION = "development"
REDIS_SCHEMES = ("redis", "rediss", "unix")


class _Invalid(ValueError):
    """A parser's complaint about one value; the caller prefixes the file and the key. A parser
    of a mapping names the sub-key at fault in ``sub`` (``ssl_params.ca_file``), and sets
    ``unknown`` when that sub-key is not one it knows (the message is then the known key it
    resembles, or empty)."""

    def __init__(self, message: str, sub: str = "", unknown: bool = False):
        super().__init__(message)
        self.sub, self.unknown = sub, unknown

    def within(self, key: str) -> _Invalid:
        """The same complaint, one mapping further out."""
        return _Invalid(str(self), f"{key}.{self.sub}" if self.sub else key, self.unknown)


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


# --- Sidekiq's `:redis:` mapping, folded into one redis-py URL
#
# Every process (master, workers, the job code's client) connects with redis-py's from_url, and
# from_url passes a URL's query arguments to the connection (ssl_ca_certs=..., they win over
# keyword arguments). So the file's Redis, whichever way it is written, becomes one URL, and
# nothing past this module has to know about these options.

_VERIFY_MODES = {0: "none", 1: "required", "none": "none", "optional": "optional",
                 "required": "required", "verify_none": "none", "verify_peer": "required"}


def _verify_mode(value: Any) -> str:
    # Ruby writes OpenSSL::SSL::VERIFY_NONE (0) or VERIFY_PEER (1); redis-py's ssl_cert_reqs.
    key = value.lower() if isinstance(value, str) else value
    if isinstance(key, bool) or key not in _VERIFY_MODES:
        raise _expected("none, optional, required, 0 (VERIFY_NONE) or 1 (VERIFY_PEER)", value)
    return _VERIFY_MODES[key]


#: ssl_params key -> (redis-py query argument, parser). cert and key are file paths here (Ruby
#: takes certificate objects, which a YAML file cannot hold).
_SSL_PARAMS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "ca_file": ("ssl_ca_certs", _path), "ca_path": ("ssl_ca_path", _path),
    "cert": ("ssl_certfile", _path), "key": ("ssl_keyfile", _path),
    "verify_mode": ("ssl_cert_reqs", _verify_mode),
}

def _subkeys(value: Any, known: Mapping[str, Any], what: str,
             refused: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A mapping's items keyed without the leading colon; unknown keys are _Invalid."""
    if not isinstance(value, Mapping):
        raise _expected(what, value)
    out: dict[str, Any] = {}
    for raw, item in value.items():
        key = raw[1:] if isinstance(raw, str) and raw.startswith(":") else raw
        if refused and key in refused:
            raise _Invalid(f"not supported: {refused[key]}", str(key))
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            raise _Invalid(close[0] if close else "", str(key), unknown=True)
        if key in out:
            raise _Invalid(f"given twice (as '{key}' and ':{key}')", key)
        out[key] = item
    return out


def _ssl_params(value: Any) -> tuple[tuple[str, str], ...]:
    params = []
    for key, item in _subkeys(value, _SSL_PARAMS, "a mapping of ssl_params").items():
        name, parse = _SSL_PARAMS[key]
        try:
            params.append((name, parse(item)))
        except _Invalid as exc:
            raise exc.within(key) from None
    return tuple(params)


_SECRET = _string("a string (quote a number)")
#: Sidekiq's redis options queued takes: name -> parser.
_REDIS_KEYS: dict[str, Callable[[Any], Any]] = {
    "url": _redis_url, "username": _SECRET, "password": _SECRET, "db": _integer(0),
    "ssl": _boolean, "ssl_params": _ssl_params,
    "connect_timeout": _seconds(0, above=True),
}
_OWN_TIMEOUTS = "queued sets its own read timeouts (a blocking fetch waits up to fetch_timeout)"
_NO_POOL = "each queued process holds its own connections; there is no pool to size"
#: Sidekiq's redis options that make no sense here, with the reason the error gives.
_REDIS_REFUSED = {
    "network_timeout": _OWN_TIMEOUTS, "read_timeout": _OWN_TIMEOUTS,
    "write_timeout": _OWN_TIMEOUTS, "size": _NO_POOL, "pool_timeout": _NO_POOL,
    "host": "give redis.url", "port": "give redis.url", "path": "give redis.url (unix://...)",
    "sentinels": "Redis Sentinel is not supported", "driver": "queued uses redis-py",
}


@dataclasses.dataclass(frozen=True)
class RedisOptions:
    """Sidekiq's ``:redis:`` mapping, checked. ``full_url()`` is the one URL it describes: the
    options replace the URL's own parts, as in redis-rb."""

    url: str | None = None
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    db: int | None = None
    ssl: bool | None = None
    ssl_params: tuple[tuple[str, str], ...] = ()  # (redis-py query argument, value)
    connect_timeout: float | None = None

    def full_url(self) -> str:
        parts = urlsplit(self.url or DEFAULT_REDIS_URL)
        scheme = "rediss" if self.ssl else parts.scheme
        user = self.username if self.username is not None else parts.username
        password = self.password if self.password is not None else parts.password
        if self.username is None and user:
            user = unquote(user)
        if self.password is None and password:
            password = unquote(password)
        auth = ""
        if user or password:
            auth = quote(user or "", safe="") + (f":{quote(password, safe='')}"
                                                   if password else "") + "@"
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        path = parts.path
        if self.db is not None and scheme == "unix":
            query["db"] = str(self.db)
        elif self.db is not None:
            path = f"/{self.db}"
            query.pop("db", None)  # a db= argument would win over the path
        query.update(self.ssl_params)
        if self.connect_timeout is not None:
            query["socket_connect_timeout"] = f"{self.connect_timeout:g}"
        host = parts.netloc.rpartition("@")[2]
        return _unsplit(scheme, auth + host, path, urlencode(query))


def _unsplit(scheme: str, netloc: str, path: str, query: str) -> str:
    # urlunsplit writes unix:///run/r.sock as unix:/run/r.sock (no netloc, no "//").
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def _redis_options(value: Any) -> RedisOptions | None:
    if value is None:
        return None
    given = _subkeys(value, _REDIS_KEYS, "a mapping of redis options (url, password, ...)",
                     _REDIS_REFUSED)
    options: dict[str, Any] = {}
    for key, item in given.items():
        try:
            options[key] = _REDIS_KEYS[key](item)
        except _Invalid as exc:
            raise exc.within(key) from None
    opts = RedisOptions(**options)
    scheme = urlsplit(opts.url or DEFAULT_REDIS_URL).scheme
    if opts.ssl and scheme == "unix":
        raise _Invalid("true, but redis.url is a unix:// socket (no TLS there)", "ssl")
    if opts.ssl is False and scheme == "rediss":
        raise _Invalid("false, but redis.url is rediss:// (TLS)", "ssl")
    if opts.ssl_params and not (opts.ssl or scheme == "rediss"):
        raise _Invalid("needs TLS: a rediss:// redis.url, or ssl: true", "ssl_params")
    return opts


def mask_url(url: str) -> str:
    """The URL with its password (in the user part or a password= argument) shown as ****."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password:
        netloc = f"{parts.username or ''}:****@{netloc.rpartition('@')[2]}"
    query = "&".join("password=****" if item.startswith("password=") else item
                     for item in parts.query.split("&")) if parts.query else ""
    return _unsplit(parts.scheme, netloc, parts.path, query)


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

    config_file: str | None = _s(None, _path, "Read settings from this YAML file (Sidekiq's "
                                 f"sidekiq.yml); without -C, {DEFAULT_CONFIG_FILE} in the working "
                                 "directory if it exists.",
                                 flags=("-C", "--config"), not_in_file="use -C")
    environment: str | None = _s(None, _word, "Environment section of the file to use "
                                 f"(else $APP_ENV, $RAILS_ENV, $RACK_ENV, else {DEFAULT_SECTION}).",
                                 flags=("-e", "--environment"),
                                 not_in_file="use -e or APP_ENV/RAILS_ENV/RACK_ENV")
    section: str | None = _s(None, _word, "The environment section of the file in effect: the "
                             f"one -e (else $APP_ENV..., else '{DEFAULT_SECTION}') names, if the "
                             "file has it.", not_in_file="it follows from -e and the file")
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
    require: tuple[str, ...] = _s((), _strings, "Python modules (app.jobs) or files "
                                  "(app/jobs.py) that define the jobs. Paths resolve against the "
                                  "working directory, which goes first on sys.path (as for "
                                  "python -m).", flags=("-r", "--require"))
    serve_no_jobs: bool = _s(False, _boolean, "Run no workers and take no jobs: a process only "
                             "for the scheduler (due scheduled jobs and retries onto their "
                             "queues) and recovery. Without it queued refuses to start when the "
                             "job code registers no job class.", flags=("--serve-no-jobs",))
    redis_url: str = _s(DEFAULT_REDIS_URL, _redis_url, "Redis to use. $REDIS_URL wins over the "
                        "file, --redis-url over both.", flags=("--redis-url",))
    redis: RedisOptions | None = _s(None, _redis_options, "Sidekiq's redis: mapping, instead of "
                                    "redis_url: url, username, password, db, ssl, ssl_params "
                                    "(ca_file, ca_path, cert, key, verify_mode), connect_timeout.")
    redis_source: str = _s("the default", _text, "Where redis_url came from (--redis-url, "
                           "REDIS_URL, the file, the default, embedded_redis); logged at start.",
                           not_in_file="queued records it")
    namespace: str | None = _s(None, _word, "Prefix for every Redis key (redis-namespace style).")
    embedded_redis: str | None = _s(None, _path, "Run our own redis-server with its data in this "
                                    "directory (relative to the working directory).")
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
    pidfile: str | None = _s(None, _path, "Write the master's pid here (Sidekiq 5 key; relative "
                             "to the working directory).")
    logfile: str | None = _s(None, _path, "Log here instead of stderr (Sidekiq 5 key; relative "
                             "to the working directory).")

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

HELP_EPILOG = (
    "Paths (-r, require, pidfile, logfile, embedded_redis) resolve against the working "
    "directory, as Sidekiq's do, not against the config file's folder; the working directory also "
    "goes first on sys.path, so -r app.jobs imports as python -m would. The Redis URL: "
    "--redis-url, else $REDIS_URL, else redis_url or redis: in the file, else "
    f"{DEFAULT_REDIS_URL}.")

#: Settings the command line can give, in the order of --help.
_CLI_SETTINGS = ("config_file", "concurrency", "queues", "require", "shutdown_timeout",
                 "environment", "tag", "verbose", "redis_url", "serve_no_jobs")
_CLI_KINDS: dict[str, dict[str, Any]] = {
    "config_file": {"metavar": "FILE"}, "concurrency": {"type": int, "metavar": "N"},
    "queues": {"action": "append", "metavar": "QUEUE[,WEIGHT]"},
    "require": {"action": "append", "metavar": "MODULE_OR_FILE"},
    "shutdown_timeout": {"type": float, "metavar": "SECONDS"},
    "environment": {"metavar": "ENV"}, "tag": {"metavar": "TAG"},
    "verbose": {"action": "store_true", "default": None}, "redis_url": {"metavar": "URL"},
    "serve_no_jobs": {"action": "store_true", "default": None},
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queued", epilog=HELP_EPILOG,
                                     description="Run Sidekiq-format jobs from Redis.")
    for name in _CLI_SETTINGS:
        setting = SETTINGS[name]
        parser.add_argument(*setting.flags, dest=name, help=setting.help, **_CLI_KINDS[name])
    parser.add_argument("-V", "--version", action="store_true", help="Print the version and exit.")
    return parser


def _cli_values(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, parsed like file values (CLI lists replace)."""
    values = {}
    for name in _CLI_SETTINGS[1:]:
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


def _file_names() -> list[str]:
    return [name for name, s in SETTINGS.items() if not s.not_in_file] + list(ALIASES)


def _unknown(source: str, where: str, key: str) -> ConfigError:
    close = difflib.get_close_matches(key, _file_names(), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return _error(f"{source}: unknown key '{where}{key}'{hint}")


def _parse(setting: Setting, value: Any, source: str, label: str) -> Any:
    try:
        return setting.parse(value)
    except _Invalid as exc:
        if exc.unknown:
            parent = label + "".join(f".{k}" for k in exc.sub.split(".")[:-1])
            hint = f" (did you mean '{parent}.{exc}'?)" if str(exc) else ""
            raise _error(f"{source}: unknown key '{label}.{exc.sub}'{hint}") from None
        raise _error(f"{source}: {label}{'.' + exc.sub if exc.sub else ''}: {exc}") from None


# Blocks of other gems that queued does not do yet. The file may not have them: a schedule
# dropped without a word while the log says the scheduler runs is the worst kind of silence.
# (Periodic jobs, when they come, replace this with settings of their own.)
NOT_YET = {
    name: "periodic jobs (sidekiq-scheduler / sidekiq-cron) are not supported yet; remove the "
          "block, or run those jobs with something else for now"
    for name in ("schedule", "scheduler")}


def _not_yet(source: str, where: str, key: str) -> ConfigError:
    return _error(f"{source}: {where}{key}: {NOT_YET[key]}")


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
    """Parse one mapping of the file. Mapping-valued keys that are no setting go to
    ``sections`` if given (the top level), to be checked as environment sections."""
    values: dict[str, Any] = {}
    for name, (key, value) in _normalized(mapping, source, where).items():
        setting = SETTINGS.get(name)
        if name in NOT_YET:
            raise _not_yet(source, where, key)
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


def _names_a_setting(key: Any) -> bool:
    """Whether a key is a setting, or looks like a misspelt one."""
    if not isinstance(key, str):
        return False
    name = key[1:] if key.startswith(":") else key
    return (ALIASES.get(name, name) in SETTINGS or name in NOT_YET
            or bool(difflib.get_close_matches(name, _file_names(), n=1)))


#: Names that are environment sections whatever they hold (for the error about a key in them).
USUAL_ENVIRONMENTS = ("development", "test", "staging", "production")


def _sections(found: dict[str, Mapping], source: str,
              environment: str | None) -> dict[str, dict[str, Any]]:
    """Every top-level mapping that is not a setting, parsed as an environment section. Each
    must be one, selected or not: a mapping none of whose keys is (nearly) a setting, under a
    name that is no environment's, is someone's block (``:redis:`` misspelt, another gem's)
    that queued would otherwise drop without a word; and a typo inside any section is a typo."""
    parsed = {}
    for name, mapping in found.items():
        if (mapping and name != environment and name not in USUAL_ENVIRONMENTS
                and not any(map(_names_a_setting, mapping))):
            # The only keys whose value is a mapping: a near miss of one is a typo.
            close = difflib.get_close_matches(name, ["redis", *NOT_YET], n=1)
            why = (f"did you mean '{close[0]}'?" if close else "a mapping, but not an environment "
                   f"section: '{_key(next(iter(mapping)), source, '')}' is not a setting")
            raise _error(f"{source}: unknown key '{name}' ({why})")
        parsed[name] = _file_level(mapping, source, where=f"{name}.")
    return parsed


def _select(sections: Mapping[str, Any], source: str, environment: str | None,
            origin: str | None) -> str | None:
    """The section in effect: the environment's (Sidekiq's ``opts.merge(opts.delete(env))``).
    An environment named explicitly whose section is missing while one is spelt nearly like it
    is a typo on one side or the other, not a reason to run on the top level alone."""
    env = environment or DEFAULT_SECTION
    if env in sections:
        return env
    close = difflib.get_close_matches(env, list(sections), n=1) if environment else []
    if close:
        raise _error(f"{source}: no section for environment '{env}' (from {origin}); did you "
                     f"mean the section '{close[0]}'?")
    return None


def _file_values(data: Any, source: str, environment: str | None,
                 origin: str | None) -> tuple[dict[str, Any], str | None]:
    """The top level with the chosen environment section merged over it; and that section."""
    if data is None:
        return {}, None
    if not isinstance(data, Mapping):
        raise _error(f"{source}: expected a mapping of settings at the top level, "
                     f"got {type(data).__name__}")
    found: dict[str, Mapping] = {}
    values = _file_level(data, source, sections=found)
    sections = _sections(found, source, environment)
    section = _select(sections, source, environment, origin)
    if section is not None:
        values.update(sections[section])
    return values, section


# --- putting it together

def _error(message: str) -> ConfigError:
    return ConfigError(" ".join(message.split()))


def _environment(cli: dict[str, Any], environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(environment, where it was given), popped from ``cli``."""
    if "environment" in cli:
        return cli.pop("environment"), "-e"
    var = next((v for v in ENVIRONMENT_VARS if environ.get(v)), None)
    return (environ[var], var) if var else (None, None)


def _check_redis_keys(values: dict[str, Any], source: str) -> None:
    if "embedded_redis" in values:
        for other in ("redis_url", "redis"):
            if values.get(other) is not None:
                raise _error(f"{source}: embedded_redis: cannot be set together with {other} "
                             "(queued starts its own Redis)")
    if "redis_url" in values and values.get("redis") is not None:
        raise _error(f"{source}: redis: cannot be set together with redis_url (both say which "
                     "Redis to use; keep one)")


def _redis_choice(values: dict[str, Any], cli_url: str | None, environ: Mapping[str, str],
                  source: str) -> tuple[str, str]:
    """(Redis URL, where it came from). --redis-url, else $REDIS_URL (in containers the
    environment is how Redis is injected, so it wins over a file baked into the image), else
    the file's redis_url or redis:, else the default. embedded_redis replaces them all."""
    if values.get("embedded_redis"):
        if cli_url:
            raise _error(f"{CLI_SOURCE}: --redis-url: cannot be used with embedded_redis "
                         f"(set in {source})")
        return DEFAULT_REDIS_URL, "embedded_redis" + (
            " (REDIS_URL is not used)" if environ.get("REDIS_URL") else "")
    file_key = ("redis_url" if "redis_url" in values else
                "redis" if values.get("redis") is not None else None)
    if cli_url:
        url, origin = cli_url, "--redis-url"
    elif environ.get("REDIS_URL"):
        url = _parse(SETTINGS["redis_url"], environ["REDIS_URL"], "environment", "REDIS_URL")
        origin = "REDIS_URL"
    elif file_key == "redis_url":
        return values["redis_url"], "redis_url in the config file"
    elif file_key == "redis":
        return values["redis"].full_url(), "redis in the config file"
    else:
        return DEFAULT_REDIS_URL, "the default"
    unused = f" ({file_key} in the config file is not used)" if file_key else ""
    return url, origin + unused


def _resolve_paths(values: dict[str, Any]) -> None:
    # Against the working directory, as Sidekiq's: made absolute once, here, so the log and
    # every process see the same file whatever they do later. (require stays as written: it
    # may be a module name; cli.load_app resolves it against the same directory.)
    for name in ("embedded_redis", "pidfile", "logfile"):
        if values.get(name):
            values[name] = os.path.abspath(values[name])


def _build(data: Any, source: str, cli: dict[str, Any], environ: Mapping[str, str],
           config_file: str | None) -> Config:
    environment, origin = _environment(cli, environ)
    values, section = _file_values(data, source, environment, origin)
    _check_redis_keys(values, source)
    cli_url = cli.pop("redis_url", None)
    values.update(cli)
    values["redis_url"], values["redis_source"] = _redis_choice(values, cli_url, environ, source)
    _resolve_paths(values)
    if values.get("serve_no_jobs"):
        values["concurrency"] = 0  # no workers: nothing here could run a job
    _check_lease(values, source)
    spec = values.pop("queues", ()) or (("default", None),)
    # Sidekiq's parse_queue: strict unless some queue has an explicit weight > 0.
    strict = not any(weight for _, weight in spec)
    queues = tuple((name, 1 if weight is None else weight) for name, weight in spec)
    return Config(config_file=config_file, environment=environment, section=section,
                  queues=queues, strict=strict, **values)


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
    if path is None and os.path.isfile(DEFAULT_CONFIG_FILE):
        path = DEFAULT_CONFIG_FILE  # as Sidekiq: config/sidekiq.yml when there is one
    if path is None:
        return _build(None, CLI_SOURCE, cli, environ, None)
    return _build(_read_yaml(path), path, cli, environ, path)


def load(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Parse argv (default sys.argv[1:]), read the -C file, merge, validate."""
    return from_args(build_parser().parse_args(argv), environ)


def from_dict(data: Mapping, *, source: str = "<dict>",
              environ: Mapping[str, str] | None = None) -> Config:
    """Validate a mapping written in the file dialect, as if it were a file named ``source``."""
    environ = os.environ if environ is None else environ
    return _build(data, source, {}, environ, None)


# --- what the master says at start

def startup_line(cfg: Config) -> str:
    """One line on where the configuration came from: the file read, the environment section
    in effect, the Redis URL (password masked) and its source. For example
    ``config: /etc/queued/sidekiq.yml (environment production); Redis
    redis://:****@host:6379/0 from REDIS_URL``."""
    if cfg.config_file is None:
        read = f"none (no -C, and no {DEFAULT_CONFIG_FILE} in {os.getcwd()})"
    else:
        read = f"{os.path.abspath(cfg.config_file)} ({_section_note(cfg)})"
    return f"config: {read}; Redis {mask_url(cfg.redis_url)} from {cfg.redis_source}"


def _section_note(cfg: Config) -> str:
    if cfg.section is not None:
        return f"environment {cfg.section}" + ("" if cfg.environment else ", the default")
    if cfg.environment:
        return f"environment {cfg.environment}: no such section, top level only"
    return "no environment section"
