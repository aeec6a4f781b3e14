"""``queued -C sidekiq.yml``: parse, load the job code once, run the master, map errors to
exit codes. Thin on purpose; everything it calls is tested on its own."""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
import os
import signal
import sys
import traceback
import warnings

from .. import __version__, config as config_mod
from .. import client
from . import log as logsetup
from . import periodic
from ..errors import APP_LOAD_ERROR, EXIT_CONFIG_ERROR, AppLoadError, ConfigError, QueuedError
from ..job import JobNameClash, registry

log = logging.getLogger("queued")


def load_app(requires, base_dir: str) -> None:
    """Import each ``-r`` target once, in the master, before any fork (so workers share the
    code copy-on-write). A file path, a package directory or a dotted module name; paths are
    relative to ``base_dir`` (the daemon passes the working directory, as Sidekiq resolves
    them), which also goes first on sys.path, as ``python -m`` puts it there. Two classes
    under one job name are an error: which one would run depended on the import order."""
    if base_dir not in sys.path:
        sys.path.insert(0, base_dir)
    for target in requires:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", JobNameClash)
                _import(target, base_dir)
        except BaseException as e:  # noqa: BLE001 - any error in job code is a load error
            if isinstance(e, KeyboardInterrupt):
                raise
            log.debug("loading %s failed", target, exc_info=True)
            text = " ".join(f"{type(e).__name__}: {e}".split())  # one line, whatever e says
            raise AppLoadError(f"cannot load job code {target!r}: {text}"
                               f"{_where(e, base_dir)}") from None


def _where(exc: BaseException, base_dir: str) -> str:
    """`` (file:line)`` of the deepest frame in the application's own code (not the standard
    library or site-packages, where the error often surfaces)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}:{exc.lineno})"
    skip = (os.path.dirname(os.__file__),
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)  # queued/
    own = [f for f in frames if not f.filename.startswith("<")
           and not f.filename.startswith(skip) and "site-packages" not in f.filename]
    frame = (own or frames or [None])[-1]
    return f" ({frame.filename}:{frame.lineno})" if frame else ""


def _import(target: str, base_dir: str) -> None:
    path = os.path.normpath(target if os.path.isabs(target) else os.path.join(base_dir, target))
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "__init__.py")):
            raise AppLoadError(f"{target} is a directory without __init__.py")
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        importlib.import_module(os.path.basename(os.path.normpath(path)))
    elif target.endswith(".py") or os.path.isfile(path):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no such file: {path}")
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        importlib.import_module(target)


def _fail(message: str, code: int) -> int:
    print(f"queued: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    # A TERM during boot (loading job code can take seconds) used to kill the process with
    # the default action (-15). It is kept and handled once the master is up: a clean stop.
    early: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: early.append(signum))
    try:
        return _main(argv, early)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None, early: list[int]) -> int:
    args = config_mod.build_parser().parse_args(argv)
    if args.version:
        print(f"queued {__version__}")
        return 0
    try:
        cfg = config_mod.from_args(args)
    except ConfigError as e:
        return _fail(str(e), EXIT_CONFIG_ERROR)
    logsetup.setup(cfg.log_level, cfg.logfile)
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
        load_app(cfg.require, os.getcwd())
        _check_jobs(cfg)
        periodic.check(cfg)
        return _run(cfg, early, embedded)
    except AppLoadError as e:
        return _fail(str(e), APP_LOAD_ERROR)
    except (ConfigError, QueuedError) as e:
        return _fail(str(e), EXIT_CONFIG_ERROR)
    finally:
        if embedded is not None:
            embedded.stop()


def _check_jobs(cfg) -> None:
    """A daemon with no job class would fetch every job and send it to retry as an unknown
    class: refuse, unless the config says this process serves no jobs on purpose."""
    if registry.names() or cfg.serve_no_jobs:
        return
    loaded = (f"the job code ({', '.join(cfg.require)}) registers none" if cfg.require
              else "no job code is given")
    raise AppLoadError(f"no job classes: {loaded}. Pass the job code with -r or :require:, or "
                       "set serve_no_jobs: true for a process that only schedules and recovers")


def _run(cfg, early_signals: list[int], embedded=None) -> int:
    from .master import Master
    # After the job code loaded: a boot that fails there says so in one line, nothing else.
    log.info("%s", config_mod.startup_line(cfg))
    if cfg.serve_no_jobs:
        log.info("serve_no_jobs: no workers; this process schedules and recovers only%s",
                 f" (job classes loaded, not served: {', '.join(registry.names())})"
                 if registry.names() else "")
    else:
        log.info("jobs: %s", ", ".join(sorted(registry.names())))
    if cfg.pidfile:
        with open(cfg.pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")
    try:
        return Master(cfg, early_signals, embedded).run()
    finally:
        if cfg.pidfile:
            try:
                os.unlink(cfg.pidfile)
            except OSError:
                pass
