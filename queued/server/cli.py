"""``queued -C sidekiq.yml``: parse, load the job code once, run the master, map errors to
exit codes. Thin on purpose; everything it calls is tested on its own."""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys

from .. import __version__, config as config_mod
from .. import client
from . import log as logsetup
from . import periodic
from ..errors import APP_LOAD_ERROR, EXIT_CONFIG_ERROR, AppLoadError, ConfigError, QueuedError
from ..jobregistry import registry
from .appcode import AppCode, load_app
from .notify import Notifier

__all__ = ["main", "load_app"]  # load_app: tests and embedders import it from here

log = logging.getLogger("queued")


def _fail(message: str, code: int) -> int:
    print(f"queued: {message}", file=sys.stderr)
    return code


#: The signals the master handles (mastersignals.SIGNALS, but SIGCHLD: its default is to
#: ignore), recorded from main's first line until the master's own handlers are in (run()),
#: which acts on them in order of arrival. During boot (loading the job code can take seconds)
#: their default actions killed the process (TERM, HUP, USR1, USR2), raised KeyboardInterrupt
#: in the import (INT), or suspended it (TSTP, TTIN): issue 16.1.10.
EARLY_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
                 signal.SIGTSTP, signal.SIGTTIN)


def main(argv: list[str] | None = None) -> int:
    early: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: early.append(signum))
                for sig in EARLY_SIGNALS}
    try:
        return _main(argv, early)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _main(argv: list[str] | None, early: list[int]) -> int:
    args = config_mod.build_parser().parse_args(argv)
    if args.version:
        print(f"queued {__version__}")
        return 0
    try:
        # In a Django project (queued/django: DJANGO_SETTINGS_MODULE, or -r naming its
        # folder), Django is set up first and may hold the config (settings.QUEUED).
        django = _django_project(args)
        cfg = django.config(args) if django else config_mod.from_args(args)
    except AppLoadError as e:
        return _fail(str(e), APP_LOAD_ERROR)
    except ConfigError as e:
        return _fail(str(e), EXIT_CONFIG_ERROR)
    try:
        _setup_logging(cfg)
        _write_pidfile(cfg)
    except _FileError as e:
        return _fail(str(e), EXIT_CONFIG_ERROR)
    try:
        return _boot(args, cfg, early, django)
    finally:
        _remove_pidfile(cfg)


class _FileError(Exception):
    """A file the daemon writes at boot (``pidfile:``, ``logfile:``) cannot be written: one
    line and exit 2, so systemd's RestartPreventExitStatus=2 stops the restarts (a traceback
    and status 1 had systemd restart it every second: issue 16.2)."""

    def __init__(self, cfg, setting: str, path: str, err: OSError):
        super().__init__(f"{cfg.config_file or 'the configuration'}: {setting}: cannot write "
                         f"{path} ({err.strerror or err})")


def _setup_logging(cfg) -> None:
    try:
        logsetup.setup(cfg.log_level, cfg.logfile, log_format=cfg.log_format)
    except OSError as e:
        raise _FileError(cfg, "logfile", cfg.logfile, e) from None


def _write_pidfile(cfg) -> None:
    """Before the job code loads (seconds for a big app): a path that cannot be written is
    known at once, and the pid is there as early as the process is."""
    if cfg.pidfile:
        try:
            with open(cfg.pidfile, "w") as f:
                f.write(f"{os.getpid()}\n")
        except OSError as e:
            raise _FileError(cfg, "pidfile", cfg.pidfile, e) from None


def _remove_pidfile(cfg) -> None:
    if cfg.pidfile:
        try:
            os.unlink(cfg.pidfile)
        except OSError:
            pass


def _boot(args, cfg, early: list[int], django=None) -> int:
    # Taken out of the environment before anything is started (the embedded redis-server,
    # the job code, workers): only the master speaks to systemd.
    notifier = Notifier.from_environ()
    embedded = None
    try:
        if cfg.embedded_redis:
            from .embedded import EmbeddedRedis
            embedded = EmbeddedRedis(cfg.embedded_redis)
            cfg = dataclasses.replace(cfg, redis_url=embedded.start())
            log.info("embedded Redis pid=%d at %s", embedded.pid, embedded.url)
        # Producers inside jobs (and the job code's own get_redis()) use the daemon's Redis.
        client.configure(url=cfg.redis_url, namespace=cfg.namespace)
        # Paths resolve against the working directory, as Sidekiq's do: with a systemd unit's
        # WorkingDirectory=/opt/myapp, `:require: ./app/jobs.py` is /opt/myapp/app/jobs.py
        # wherever the config file lives.
        if django:
            django.install(cfg)  # before AppCode: its hooks outlive a HUP's reload
        code = AppCode(os.getcwd(), traced=django.discovered if django else ())
        code.load(cfg.require, cfg.serve_no_jobs)
        periodic.check(cfg)
        return _run(cfg, early, embedded, notifier, code, _reader(args, embedded, django))
    except AppLoadError as e:
        return _fail(str(e), APP_LOAD_ERROR)
    except (ConfigError, QueuedError) as e:
        return _fail(str(e), EXIT_CONFIG_ERROR)
    finally:
        if embedded is not None:
            embedded.stop()


def _django_project(args):
    """queued.django's daemon side when a Django project is named, set up; else None."""
    from ..django.project import find  # (imports no Django)
    project = find(args.require, os.getcwd(), os.environ)
    if project is None:
        return None
    from ..django.daemon import DjangoDaemon
    django = DjangoDaemon(project)
    django.setup()
    return django


def _reader(args, embedded, django=None):
    """How a HUP reads the config again: as at boot, from the same command line."""
    def read():
        cfg = django.config(args) if django else config_mod.from_args(args)
        return dataclasses.replace(cfg, redis_url=embedded.url) if embedded else cfg
    return read


def _run(cfg, early_signals: list[int], embedded=None, notifier=None, code=None,
         reread=None) -> int:
    from .master import Master
    # After the job code loaded: a boot that fails there says so in one line, nothing else.
    log.info("%s", config_mod.startup_line(cfg))
    if cfg.serve_no_jobs:
        log.info("serve_no_jobs: no workers; this process schedules and recovers only%s",
                 f" (job classes loaded, not served: {', '.join(registry.names())})"
                 if registry.names() else "")
    else:
        log.info("jobs: %s", ", ".join(sorted(registry.names())))
    return Master(cfg, early_signals, embedded, notifier, code, reread).run()
