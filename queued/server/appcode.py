"""The job code: imported once by the master before it forks (workers share it copy-on-write),
and imported again by the master on HUP (a rolling restart's first step, rolling.py).

Why the master imports it again itself, in place, rather than each new worker importing it
after its fork: a worker forked later (a crash's respawn, a recycled worker) must get the code
its siblings run, not whatever is on disk at that moment; a new worker forks in milliseconds
and shares the code, as at boot; and a reload that fails changes nothing anywhere: everything
the new import touched is put back, and the workers forked from then on get the old code.

What is imported again: the application's own modules, those the first import brought in from
outside the standard library, site-packages and queued itself (``_own``). They are taken out of
``sys.modules`` so the import runs their files afresh. Libraries stay as loaded (a new version
of a library needs a restart), and so do compiled extension modules (Python cannot load one
twice). queued's registries that job code fills as it is imported (job classes, client and
server middleware, lifecycle and error handlers, the strict_args mode, @queued.periodic
schedules) go back to what they held before the job code first loaded, so the new code
registers its own without clashing with the old. A ``startup`` handler is not run again.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import sysconfig
import traceback
import warnings
from typing import Callable, NamedTuple, Sequence

from .. import events
from ..arguments import strict_args
from ..errors import AppLoadError
from ..jobregistry import JobNameClash, registry
from ..middleware import client_middleware, server_middleware
from ..periodic import declared as declared_schedules  # (queued.periodic is the decorator)

log = logging.getLogger("queued")

_QUEUED = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # queued/


def load_app(requires, base_dir: str, traced=()) -> None:
    """Import each ``-r`` target once, in the master, before any fork (so workers share the
    code copy-on-write). A file path, a package directory or a dotted module name; paths are
    relative to ``base_dir`` (the daemon passes the working directory, as Sidekiq resolves
    them), which also goes first on sys.path, as ``python -m`` puts it there. Two classes
    under one job name are an error: which one would run depended on the import order.
    A target in ``traced`` (a Django app's jobs module, found rather than named) that fails
    logs its traceback too: the one line does not say which of the app's imports broke."""
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
            if target in traced:
                log.error("loading %s failed", target, exc_info=True)
            else:
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
    skip = (os.path.dirname(os.__file__), _QUEUED)
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


def check_jobs(requires: Sequence[str], serve_no_jobs: bool) -> None:
    """A daemon with no job class would fetch every job and send it to retry as an unknown
    class: refuse, unless the config says this process serves no jobs on purpose."""
    if registry.names() or serve_no_jobs:
        return
    loaded = (f"the job code ({', '.join(requires)}) registers none" if requires
              else "no job code is given")
    raise AppLoadError(f"no job classes: {loaded}. Pass the job code with -r or :require:, or "
                       "set serve_no_jobs: true for a process that only schedules and recovers")


class _Registries(NamedTuple):
    """What job code registers with queued as it is imported."""
    classes: dict
    client: list
    server: list
    events: tuple
    strict: str | None
    schedules: dict  # @queued.periodic declarations

    @classmethod
    def capture(cls) -> _Registries:
        mode = strict_args()  # (returns the mode in force; put back at once)
        strict_args(mode or False)
        return cls(registry.snapshot(), client_middleware.snapshot(),
                   server_middleware.snapshot(), events.snapshot(), mode,
                   dict(declared_schedules))

    def restore(self) -> None:
        registry.restore(self.classes)
        client_middleware.restore(self.client)
        server_middleware.restore(self.server)
        events.restore(self.events)
        strict_args(self.strict or False)
        declared_schedules.clear()
        declared_schedules.update(self.schedules)


class AppCode:
    """This master's job code: ``load`` at boot, ``reload`` on HUP."""

    def __init__(self, base_dir: str, traced=()):
        self.base_dir = base_dir
        self.traced = tuple(traced)  # targets whose failure logs its traceback (load_app)
        self.baseline = _Registries.capture()  # before any job code: queued's own entries
        self.path = list(sys.path)
        self.modules: set[str] = set()          # the application's modules, as loaded

    def load(self, requires: Sequence[str], serve_no_jobs: bool = False) -> None:
        before = set(sys.modules)
        load_app(requires, self.base_dir, self.traced)
        check_jobs(requires, serve_no_jobs)
        self.modules = _own(set(sys.modules) - before)

    def reload(self, requires: Sequence[str], serve_no_jobs: bool = False,
               check: Callable[[], None] | None = None) -> None:
        """Import the job code again, then ``check`` what needs it (the schedules' classes).
        On any failure (AppLoadError or check's ConfigError says why) everything is as it
        was: modules, registries, sys.path."""
        saved = _Registries.capture()
        saved_modules = {name: sys.modules.pop(name) for name in self.modules
                         if name in sys.modules}
        saved_path = list(sys.path)
        self.baseline.restore()
        sys.path[:] = self.path
        importlib.invalidate_caches()  # files added since the last import are found
        before = set(sys.modules)
        try:
            load_app(requires, self.base_dir, self.traced)
            check_jobs(requires, serve_no_jobs)
            if check is not None:
                check()
        except BaseException:
            for name in _own(set(sys.modules) - before):
                sys.modules.pop(name, None)
            sys.modules.update(saved_modules)
            sys.path[:] = saved_path
            saved.restore()
            raise
        self.modules = _own(set(sys.modules) - before)


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")
            if k in paths}
    return tuple(d + os.sep for d in dirs) + (os.path.realpath(_QUEUED) + os.sep,)


def _own(names) -> set[str]:
    """The application's modules among ``names``: loaded from a source file outside the
    standard library, site-packages and queued (see the module header)."""
    libraries = _library_dirs()
    out = set()
    for name in names:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if not path or path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
            continue
        real = os.path.realpath(path)
        if real.startswith(libraries) or os.sep + "site-packages" + os.sep in real \
                or os.sep + "dist-packages" + os.sep in real:
            continue
        out.add(name)
    return out
