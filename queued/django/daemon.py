"""The ``queued`` daemon inside a Django project (server/cli.py calls these when project.py
finds one; nothing here runs otherwise):

1. ``setup()``: ``django.setup()``, before any job code is imported (models and settings are
   ready when a jobs module imports them), then each installed app's ``jobs`` module is found
   (as Celery's autodiscovery finds ``tasks``). They are imported with the job code, strictly:
   an error in one stops the daemon with its traceback (Celery's autodiscovery swallowed them
   for years: #2119, #5262), and a HUP imports them again.
2. ``config(args)``: queued's settings from ``settings.QUEUED`` (the config file's dialect, as
   a dict) when the project has it, else from the config file as usual; never both.
3. ``install(config)``: pushes wait for the commit (commit.py); the master closes its database
   connections before each fork, and every job runs between two ``close_old_connections()``
   (connections.py); a warning when the database cannot serve every worker (dbcheck.py).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import sys
import traceback

from .. import events
from ..config import from_args
from ..errors import AppLoadError
from ..middleware import server_middleware
from .project import Project

log = logging.getLogger("queued.django")

#: The module of each installed app that holds its jobs.
JOBS_MODULE = "jobs"


class DjangoDaemon:
    def __init__(self, project: Project):
        self.project = project
        self.discovered: tuple[str, ...] = ()

    def setup(self) -> None:
        """Django set up, and the apps' jobs modules found (imported later, by AppCode).
        Anything that fails is an AppLoadError, its traceback written to stderr first."""
        os.environ["DJANGO_SETTINGS_MODULE"] = self.project.settings
        if self.project.root not in sys.path:
            sys.path.insert(0, self.project.root)
        try:
            import django
            django.setup()
            self.discovered = tuple(_jobs_modules())
        except Exception as e:  # noqa: BLE001 - whatever the project raises stops the boot
            traceback.print_exc(file=sys.stderr)
            text = " ".join(f"{type(e).__name__}: {e}".split())
            raise AppLoadError(f"cannot set up Django ({self.project.settings}): {text}") from None
        _keep_queued_loggers()

    def config(self, args):
        """The Config: from ``settings.QUEUED`` or the config file; the -r targets that named
        the project dropped, the apps' jobs modules added (first, in INSTALLED_APPS order)."""
        from django.conf import settings
        given = getattr(settings, "QUEUED", None)
        source = f"settings.QUEUED of {self.project.settings}"
        cfg = from_args(args, settings=None if given is None else (given, source))
        require = [r for r in cfg.require if r not in self.project.consumed]
        return dataclasses.replace(
            cfg, require=(*self.discovered, *(r for r in require if r not in self.discovered)))

    def install(self, config) -> None:
        """Before the job code is loaded (so a HUP's reload keeps all of it)."""
        from . import commit, connections, dbcheck
        commit.install()
        server_middleware.prepend(connections.CloseOldConnections)
        events.on("before_fork")(connections.close_all)
        if config.concurrency:
            dbcheck.warn(config)
        connections.close_all()


def _jobs_modules() -> list[str]:
    """``<app>.jobs`` of each installed app (a package) that has one, in INSTALLED_APPS
    order. Found, not imported: a module that is missing is skipped; one that exists and
    fails is an error when it is imported."""
    from django.apps import apps
    from django.conf import settings
    if not getattr(settings, "QUEUED_AUTODISCOVER", True):
        return []
    found = []
    for app in apps.get_app_configs():
        if not hasattr(app.module, "__path__"):
            continue
        name = f"{app.name}.{JOBS_MODULE}"
        if importlib.util.find_spec(name) is not None:
            found.append(name)
    return found


def _keep_queued_loggers() -> None:
    """Django's LOGGING goes through dictConfig, which disables every logger that exists and
    is not named in it unless ``disable_existing_loggers`` is False; queued's own loggers
    exist by then, and the daemon would go silent."""
    for name, logger in logging.root.manager.loggerDict.items():
        if (name == "queued" or name.startswith("queued.")) and \
                isinstance(logger, logging.Logger):
            logger.disabled = False
