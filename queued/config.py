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
import os
from collections.abc import Mapping
from typing import Any

from . import groups
from .configfile import file_values, read_yaml
from .errors import ConfigError
from .redisopts import DEFAULT_REDIS_URL, RedisOptions, mask_url
from .settings import (ALIASES, DEFAULT_CONFIG_FILE, ENVIRONMENT_VARS, SETTINGS, Config,
                       Setting, describe, parse)
from .values import Invalid, error

__all__ = ["Config", "ConfigError", "RedisOptions", "Setting", "SETTINGS", "ALIASES",
           "describe", "load", "from_args", "from_dict", "build_parser", "startup_line", "mask_url",
           "choose_redis", "embedded_socket_url", "redis_url_of"]

CLI_SOURCE = "command line"


# --- command line

HELP_EPILOG = (
    "Paths (-r, require, pidfile, logfile, embedded_redis) resolve against the working "
    "directory, as Sidekiq's do, not against the config file's folder; the working directory also "
    "goes first on sys.path, so -r app.jobs imports as python -m would. The Redis URL: "
    "--redis-url, else $REDIS_URL, else redis_url or redis: in the file, else "
    f"{DEFAULT_REDIS_URL} (redis+sentinel://host:port,.../service_name for Redis Sentinel). "
    "Signals to the master: TERM/INT stop gracefully, TSTP/USR1 quiet, HUP rolling restart "
    "(new job code and config, workers replaced one at a time), TTIN dump each worker's job "
    "and stack, USR2 reopen the logfile (docs/operating.md).")

#: Settings the command line can give, in the order of --help.
_CLI_SETTINGS = ("config_file", "concurrency", "threads", "queues", "require",
                 "shutdown_timeout", "environment", "tag", "verbose", "redis_url", "serve_no_jobs")
_CLI_KINDS: dict[str, dict[str, Any]] = {
    "config_file": {"metavar": "FILE"}, "concurrency": {"type": int, "metavar": "N"},
    "threads": {"type": int, "metavar": "N"},
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
            values[name] = parse(setting, value, CLI_SOURCE, "/".join(setting.flags))
    return values


# --- putting it together

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
                raise error(f"{source}: embedded_redis: cannot be set together with {other} "
                            "(queued starts its own Redis)")
    if "redis_url" in values and values.get("redis") is not None:
        raise error(f"{source}: redis: cannot be set together with redis_url (both say which "
                    "Redis to use; keep one)")


def choose_redis(values: dict[str, Any], cli_url: str | None, environ: Mapping[str, str],
                 source: str, where: str = "the config file") -> tuple[str, str]:
    """(Redis URL, where it came from): the one rule by which the daemon and ``queuedctl``
    both pick Redis (issue 16: they used opposite rules, and the Kubernetes probe recipe of
    docs/queuedctl.md found no live process in a healthy pod). The command line's URL
    (``queued --redis-url``, ``queuedctl --redis``), else ``$REDIS_URL`` (in containers the
    environment is how Redis is injected, so it wins over a file baked into the image), else
    the file's redis_url or redis:, else the default. embedded_redis replaces them all (its
    socket: embedded_socket_url)."""
    if values.get("embedded_redis"):
        if cli_url:
            raise error(f"{CLI_SOURCE}: --redis-url: cannot be used with embedded_redis "
                        f"(set in {source})")
        return DEFAULT_REDIS_URL, "embedded_redis" + (
            " (REDIS_URL is not used)" if environ.get("REDIS_URL") else "")
    file_key = ("redis_url" if "redis_url" in values else
                "redis" if values.get("redis") is not None else None)
    if cli_url:
        url, origin = cli_url, "--redis-url"
    elif environ.get("REDIS_URL"):
        url = parse(SETTINGS["redis_url"], environ["REDIS_URL"], "environment", "REDIS_URL")
        origin = "REDIS_URL"
    elif file_key == "redis_url":
        return values["redis_url"], f"redis_url in {where}"
    elif file_key == "redis":
        return values["redis"].full_url(), f"redis in {where}"
    else:
        return DEFAULT_REDIS_URL, "the default"
    unused = f" ({file_key} in {where} is not used)" if file_key else ""
    return url, origin + unused


def embedded_socket_url(directory: str) -> str:
    """The URL of the redis-server an ``embedded_redis: DIR`` master runs (its socket in
    DIR): the daemon serves it there (server/embedded.py), queuedctl connects to it."""
    return f"unix://{os.path.join(directory, 'redis.sock')}?db=0"


def redis_url_of(cfg: Config) -> str:
    """The URL to connect to for ``cfg``: its chosen redis_url, or the embedded socket."""
    return embedded_socket_url(cfg.embedded_redis) if cfg.embedded_redis else cfg.redis_url


def _resolve_paths(values: dict[str, Any]) -> None:
    # Against the working directory, as Sidekiq's: made absolute once, here, so the log and
    # every process see the same file whatever they do later. (require stays as written: it
    # may be a module name; cli.load_app resolves it against the same directory.)
    for name in ("embedded_redis", "pidfile", "logfile"):
        if values.get(name):
            values[name] = os.path.abspath(values[name])


def _build(data: Any, source: str, cli: dict[str, Any], environ: Mapping[str, str],
           config_file: str | None, config_source: str | None = None) -> Config:
    environment, origin = _environment(cli, environ)
    values, section = file_values(data, source, environment, origin)
    _check_redis_keys(values, source)
    cli_url = cli.pop("redis_url", None)
    values.update(cli)
    given = set(values)  # (settings the file or the command line gave)
    values["redis_url"], values["redis_source"] = choose_redis(
        values, cli_url, environ, source, config_source or "the config file")
    _resolve_paths(values)
    if values.get("serve_no_jobs"):
        values["concurrency"] = 0  # no workers: nothing here could run a job
        values["groups"] = ()
    _check_lease(values, source)
    _check_schedule(values, source)
    spec = values.pop("queues", ()) or (("default", None),)
    try:
        spec = groups.check(spec, "queues" in given, values.get("groups", ()))
    except Invalid as exc:
        raise error(f"{source}: groups.{exc.sub}: {exc}") from None
    # Sidekiq's parse_queue: strict unless some queue has an explicit weight > 0.
    queues, strict = groups.with_weights(spec)
    return Config(config_file=config_file, config_source=config_source,
                  environment=environment, section=section, queues=queues, strict=strict,
                  **values)


def _check_lease(values: dict[str, Any], source: str) -> None:
    # Each heartbeat renews the master's lease for lease_timeout. With heartbeat_interval at
    # or above it, the lease lapsed between beats and two healthy masters reaped each other's
    # running jobs (a 5 s job ran twice). Half leaves room for one late beat.
    beat, lease = (values.get(name, SETTINGS[name].default)
                   for name in ("heartbeat_interval", "lease_timeout"))
    if beat * 2 > lease:
        raise error(f"{source}: heartbeat_interval ({beat:g}s) must be at most half of "
                    f"lease_timeout ({lease:g}s): each beat renews the lease, and a lease that "
                    f"lapses between beats lets other masters take back running jobs")


def _check_schedule(values: dict[str, Any], source: str) -> None:
    # Both forms at once: which one sidekiq-scheduler reads depends on its version; say so.
    if values.get("schedule") and values.get("scheduler") and values["scheduler"].schedule:
        raise error(f"{source}: schedule: give the periodic jobs once, under scheduler.schedule "
                    "(the top-level schedule: is the older form of the same thing)")


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None,
              settings: tuple[Mapping, str] | None = None) -> Config:
    """Build the Config from already-parsed arguments (so a caller can check -V first).
    ``settings``: (the file's mapping, where it is) read from elsewhere than a file (Django's
    settings.QUEUED); one source of truth: a -C file (or config/sidekiq.yml) too is refused."""
    environ = os.environ if environ is None else environ
    cli = _cli_values(args)
    path = args.config_file
    if path is None and os.path.isfile(DEFAULT_CONFIG_FILE):
        path = DEFAULT_CONFIG_FILE  # as Sidekiq: config/sidekiq.yml when there is one
    if settings is not None:
        data, source = settings
        if path is not None:
            given = "-C" if args.config_file is not None else "found in the working directory"
            raise error(f"{source} and {path} ({given}) both hold queued's settings: keep one "
                        "(queued reads one source, never a mix of two)")
        return _build(data, source, cli, environ, None, source)
    if path is None:
        return _build(None, CLI_SOURCE, cli, environ, None)
    return _build(read_yaml(path, environ), path, cli, environ, path)


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
    if cfg.config_source is not None:
        read = f"{cfg.config_source} ({_section_note(cfg)})"
    elif cfg.config_file is None:
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
