"""``queuedctl``: the operator's command, over ``queued.api``. The command line and where Redis
is are here; the commands are in ctlcmds.py (numbers, queues), ctljobs.py (jobs), ctloncall.py
(errors, find), ctltasks.py (tasks), ctlprocs.py (processes, ping), how they show things in
ctlout.py (and ctltext.py off a terminal).

Exit status (DESIGN.md's contract): 0 done; 1 the thing asked about is unhealthy or absent (a
jid not found, no such process or queue, ping failed); 2 usage or config error (argparse's
own, a bad config file, a question that cannot be asked without --yes); 3 Redis unreachable. Every error is one line on stderr,
never a traceback.

Redis, by the daemon's rule (config.choose_redis, one function for both): ``--redis URL``,
else ``$REDIS_URL``, else the config file's redis_url or ``:redis:`` (``-C CONFIG``, else
``config/sidekiq.yml`` when the working directory has one, as ``queued`` reads it), else
redis://127.0.0.1:6379/0; a file's embedded_redis socket replaces them all. The namespace comes
from ``--namespace``, else the file. (Until issue 16 a ``-C`` file won over ``$REDIS_URL`` here
while the daemon let the environment win: a probe in a pod given REDIS_URL read another Redis.)
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
from typing import NamedTuple

import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from .. import __version__, config as config_mod
from ..connection import client_from_url
from ..errors import ConfigError
from ..redisopts import mask_url
from . import cron, ctlcmds, ctljobs, ctllimits, ctloncall, ctlprocs, ctltasks, ctlweb
from . import ctlout as out
from .ctlout import INSTALL_HINT, NeedRich, require_rich
from .deadlimits import DeadLimits

EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

#: In the order of --help.
COMMANDS = [*ctlcmds.COMMANDS, *ctljobs.COMMANDS, *ctloncall.COMMANDS, *ctltasks.COMMANDS,
            *ctlprocs.COMMANDS, *cron.COMMANDS, *ctllimits.COMMANDS, *ctlweb.COMMANDS]

DESCRIPTION = """\
Look after the jobs and processes of queued (and Sidekiq) on one Redis: stats, queues,
the scheduled/retry/dead sets, what is failing (errors), where a job is (find), tasks,
periodic jobs, running processes, rate limiters, unique locks; retry, delete or kill jobs in
bulk; pause queues; quiet, stop or dump processes; a health probe."""

EPILOG = """\
Redis, by the rule the daemon uses: --redis URL, else $REDIS_URL, else the config file's
redis_url or :redis: (-C CONFIG, else config/sidekiq.yml if there is one), else
redis://127.0.0.1:6379/0. The namespace: --namespace, else the file's.
Options such as --redis, -C, --json and --format may come before or after the command.

output: tables on a terminal; off one (a pipe, a file) one line per row, nothing cut, so
grep and wc -l work; --json or --format tsv for scripts.

exit status: 0 done; 1 what was asked about is unhealthy or absent; 2 usage or config
error; 3 Redis unreachable.

examples:
  queuedctl stats
  queuedctl -C config/sidekiq.yml queues --json
  queuedctl errors dead               # what is failing, the largest groups first
  queuedctl find 0123456789abcdef01234567
  queuedctl jobs dead --class Billing::InvoiceJob --error Timeout
  queuedctl retry dead --class Billing::InvoiceJob --all --yes
  queuedctl task 5f0c...e1 --watch    # a task's progress bar, live
  queuedctl ping --queue default      # a Kubernetes probe: silent, exit 0 when healthy
Each command has its own --help."""


# --- the command line ---------------------------------------------------------------------------

def _connection_options(parser: argparse.ArgumentParser) -> None:
    """Where Redis is; accepted before and after the command (SUPPRESS: a subcommand's
    absent option must not overwrite one given before the command)."""
    group = parser.add_argument_group("where Redis is")
    group.add_argument("--redis", "--redis-url", dest="redis", metavar="URL",
                       default=argparse.SUPPRESS,
                       help="Redis URL (redis://, rediss://, unix://); wins over $REDIS_URL "
                            "and the file.")
    group.add_argument("-C", "--config", metavar="FILE", default=argparse.SUPPRESS,
                       help="read redis_url (or :redis:) and namespace from this sidekiq.yml "
                            "($REDIS_URL wins over its redis_url, as for the daemon)")
    group.add_argument("-e", "--environment", metavar="ENV", default=argparse.SUPPRESS,
                       help="environment section of the -C file (else $APP_ENV, $RAILS_ENV, "
                            "$RACK_ENV, else development)")
    group.add_argument("--namespace", metavar="NS", default=argparse.SUPPRESS,
                       help="key prefix (redis-namespace); wins over the file's")
    group.add_argument("--timeout", metavar="SECONDS", type=float, default=argparse.SUPPRESS,
                       help="give up on an unanswering Redis after this long (default 5)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queuedctl", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-V", "--version", action="version",
                        version=f"queuedctl (queued) {__version__}")
    _connection_options(parser)
    ctlcmds.json_flag(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for spec in COMMANDS:
        sub = commands.add_parser(
            spec.name, help=spec.summary,
            description=textwrap.fill(spec.description or spec.summary, 88),
            epilog=spec.epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
            aliases=spec.aliases)
        spec.arguments(sub)
        _connection_options(sub)
        sub.set_defaults(spec=spec, parser=sub)
    return parser


# --- where Redis is -----------------------------------------------------------------------------

def redis_target(args: argparse.Namespace,
                 environ: dict[str, str] | None = None) -> Target:
    """Where Redis is, by the daemon's own rule (config.choose_redis): the config is read as
    ``queued`` reads it (``-C``, else config/sidekiq.yml in the working directory), with
    ``--redis`` as the command line's URL, so queuedctl run beside a daemon, with the same
    file and environment, reads the Redis that daemon uses."""
    environ = dict(os.environ if environ is None else environ)
    given = argparse.Namespace(config_file=getattr(args, "config", None),
                               environment=getattr(args, "environment", None),
                               redis_url=getattr(args, "redis", None))
    cfg = config_mod.from_args(given, environ)
    namespace = getattr(args, "namespace", None) or cfg.namespace
    source = cfg.redis_source
    if cfg.embedded_redis:
        source = f"embedded_redis in {cfg.config_file}"
    limits = None
    if cfg.config_file is not None:  # the operator's bounds, when no daemon publishes its own
        limits = DeadLimits(cfg.dead_max_jobs, cfg.dead_timeout_in_seconds)
    return Target(config_mod.redis_url_of(cfg), namespace, source, limits)


class Target(NamedTuple):
    url: str
    namespace: str | None
    source: str
    dead_limits: DeadLimits | None


def connect(url: str, source: str, timeout: float) -> redis_lib.Redis:
    """A client that fails fast and never retries behind our back (a bulk action re-sent
    after a lost reply must be our decision)."""
    try:
        return client_from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                               retry=Retry(NoBackoff(), 0), client_name="queuedctl")
    except ValueError as e:
        raise ConfigError(f"{source}: not a Redis URL: {mask_url(url)}: {e}") from None


# --- main ---------------------------------------------------------------------------------------

def _fail(text: str, status: int) -> int:
    out.warn(text)
    return status


def parse(argv: list[str] | None) -> argparse.Namespace:
    """argparse, but JIDs may follow options (``retry dead --class X JID JID``): argparse
    takes every positional of a subcommand at the first run of them, so JIDs after an option
    come back as extras; they are added to the JIDs here, and anything else is still an
    error."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(args, "jids") or any(e.startswith("-") for e in extra):
            (args.parser if hasattr(args, "parser") else parser).error(
                f"unrecognized arguments: {' '.join(extra)}")
        args.jids = [*args.jids, *extra]
    args.format = getattr(args, "format", None) or out.default_format()
    args.json = args.format == "json"
    out.use_format(args.format)
    return args


def _safe_streams() -> None:
    """What UTF-8 cannot encode is written as an escape, never raised: every output escapes
    names and data (ctltext.py); this is for anything that slips past, under a strict UTF-8
    stdout (a UTF-8 locale, PYTHONIOENCODING=utf-8) as under C.UTF-8's surrogateescape."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    _safe_streams()
    args = parse(argv)
    spec: ctlcmds.Command = args.spec
    url = None
    try:
        spec.check(args)
        if spec.tables and args.format == "table":
            require_rich()
        target = redis_target(args)
        url = target.url
        client = connect(url, target.source, getattr(args, "timeout", 5.0))
        ctx = ctlcmds.Context(client, target.namespace, mask_url(url), target.source,
                              target.dead_limits)
        return spec.run(ctx, args)
    except ctlcmds.Usage as e:
        args.parser.error(str(e))  # exits 2 with the usage line
    except ctlcmds.Unhealthy as e:
        return _fail(str(e), EXIT_UNHEALTHY)
    except ctlcmds.NeedYes as e:
        return _fail(str(e), EXIT_USAGE)
    except NeedRich:
        return _fail(INSTALL_HINT.removeprefix("queuedctl: "), EXIT_USAGE)
    except ConfigError as e:
        return _fail(str(e), EXIT_USAGE)
    except (redis_lib.ConnectionError, redis_lib.TimeoutError) as e:
        where = mask_url(url) if url else "Redis"
        return _fail(f"Redis at {where} is unreachable: {_one_line(e)}", EXIT_UNREACHABLE)
    except redis_lib.RedisError as e:
        return _fail(f"Redis refused: {_one_line(e)}", EXIT_UNHEALTHY)
    except BrokenPipeError:
        # `queuedctl jobs dead | head`: the reader left; say nothing more.
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    return EXIT_OK


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _silence_stdout() -> None:
    # Python flushes stdout at exit and would report the broken pipe a second time.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
