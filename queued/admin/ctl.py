"""``queuedctl``: the operator's command, over ``queued.api``. The command line and where Redis
is are here; the commands are in ctlcmds.py (numbers, queues), ctljobs.py (jobs) and
ctltasks.py (tasks), ctlprocs.py (processes, ping), how they show things in ctlout.py.

Exit status (DESIGN.md's contract): 0 done; 1 the thing asked about is unhealthy or absent (a
jid not found, no such process, ping failed); 2 usage or config error (argparse's own, a bad
config file, a missing confirmation); 3 Redis unreachable. Every error is one line on stderr,
never a traceback.

Redis: ``--redis URL``, else ``-C CONFIG`` (its redis_url or ``:redis:`` mapping, its namespace,
its embedded_redis socket), else ``$REDIS_URL``, else ``config/sidekiq.yml`` when the working
directory has one (as ``queued`` reads it), else redis://127.0.0.1:6379/0. With ``-C`` the
file wins over ``$REDIS_URL`` (the daemon lets the environment win): naming a file is asking
for the Redis it names; a file that names none falls back to ``$REDIS_URL``.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
import redis as redis_lib
from redis.backoff import NoBackoff
from redis.retry import Retry

from .. import __version__, config as config_mod
from ..connection import client_from_url
from ..errors import ConfigError
from ..redisopts import DEFAULT_REDIS_URL, mask_url
from ..settings import DEFAULT_CONFIG_FILE
from . import cron, ctlcmds, ctljobs, ctllimits, ctlprocs, ctltasks, ctlweb
from .ctlout import INSTALL_HINT, NeedRich, require_rich

EXIT_OK, EXIT_UNHEALTHY, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

#: In the order of --help.
COMMANDS = [*ctlcmds.COMMANDS, *ctljobs.COMMANDS, *ctltasks.COMMANDS, *ctlprocs.COMMANDS,
            *cron.COMMANDS, *ctllimits.COMMANDS, *ctlweb.COMMANDS]

DESCRIPTION = """\
Look after the jobs and processes of queued (and Sidekiq) on one Redis: stats, queues,
the scheduled/retry/dead sets, tasks, periodic jobs, running processes, rate limiters, unique
locks; retry, delete or kill jobs in bulk; pause queues; quiet, stop or dump processes; a
health probe."""

EPILOG = """\
Redis: --redis URL, else -C CONFIG (its redis_url or :redis:, and namespace), else $REDIS_URL,
else config/sidekiq.yml if there is one, else redis://127.0.0.1:6379/0.
Options such as --redis and -C may come before or after the command.

exit status: 0 done; 1 what was asked about is unhealthy or absent; 2 usage or config
error; 3 Redis unreachable.

examples:
  queuedctl stats
  queuedctl -C config/sidekiq.yml queues --json
  queuedctl jobs dead --class Billing::InvoiceJob --error Timeout
  queuedctl retry dead --class Billing::InvoiceJob --all
  queuedctl task 5f0c...e1 --watch    # a task's progress bar, live
  queuedctl ping --queue default      # a Kubernetes probe: silent, exit 0 when healthy
Each command has its own --help."""


# --- the command line ---------------------------------------------------------------------------

def _connection_options(parser: argparse.ArgumentParser) -> None:
    """Where Redis is; accepted before and after the command (SUPPRESS: a subcommand's
    absent option must not overwrite one given before the command)."""
    group = parser.add_argument_group("where Redis is")
    group.add_argument("--redis", metavar="URL", default=argparse.SUPPRESS,
                       help="Redis URL (redis://, rediss://, unix://); wins over -C and "
                            "$REDIS_URL.")
    group.add_argument("-C", "--config", metavar="FILE", default=argparse.SUPPRESS,
                       help="read redis_url (or :redis:) and namespace from this sidekiq.yml")
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
                 environ: dict[str, str] | None = None) -> tuple[str, str | None, str]:
    """(URL, namespace, where the URL came from)."""
    environ = dict(os.environ if environ is None else environ)
    path = getattr(args, "config", None)
    given_url = getattr(args, "redis", None)
    if path is None and not given_url and not environ.get("REDIS_URL") and \
            os.path.isfile(DEFAULT_CONFIG_FILE):
        path = DEFAULT_CONFIG_FILE
    url, namespace, source = None, None, None
    if path is not None:
        url, namespace, source = _from_file(path, getattr(args, "environment", None), environ)
    if given_url:
        url, source = given_url, "--redis"
    if url is None and environ.get("REDIS_URL"):
        url, source = environ["REDIS_URL"], "REDIS_URL"
    if url is None:
        url, source = DEFAULT_REDIS_URL, "the default"
    namespace = getattr(args, "namespace", None) or namespace
    return url, namespace, source


def _from_file(path: str, environment: str | None,
               environ: dict[str, str]) -> tuple[str | None, str | None, str | None]:
    """The Redis a config file names (None when it names none), its namespace, the source.
    Read with queued's own loader, so every key and section means what it means to the
    daemon, and a bad file is the same one-line error."""
    without_env_url = {k: v for k, v in environ.items() if k != "REDIS_URL"}
    cfg = config_mod.from_args(argparse.Namespace(config_file=path, environment=environment),
                               without_env_url)
    if cfg.embedded_redis:
        # The master's own redis-server listens on this socket (queued/server/embedded.py);
        # the admin side must not import the daemon to ask it.
        url = f"unix://{os.path.join(cfg.embedded_redis, 'redis.sock')}?db=0"
        return url, cfg.namespace, f"embedded_redis in {path}"
    if cfg.redis_source == "the default":
        return None, cfg.namespace, None
    return cfg.redis_url, cfg.namespace, path


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
    sys.stderr.write(f"queuedctl: {text}\n")
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
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    spec: ctlcmds.Command = args.spec
    url = None
    try:
        spec.check(args)
        if spec.tables and not getattr(args, "json", False):
            require_rich()
        url, namespace, source = redis_target(args)
        client = connect(url, source, getattr(args, "timeout", 5.0))
        ctx = ctlcmds.Context(client, namespace, mask_url(url), source)
        return spec.run(ctx, args)
    except ctlcmds.Usage as e:
        args.parser.error(str(e))  # exits 2 with the usage line
    except ctlcmds.Unhealthy as e:
        return _fail(str(e), EXIT_UNHEALTHY)
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
