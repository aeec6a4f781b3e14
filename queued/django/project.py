"""Finding the Django project the daemon runs in, without importing Django: the settings
module named by ``DJANGO_SETTINGS_MODULE``, or a ``-r`` that names the project's folder (the
one holding ``manage.py``) or its ``manage.py``, whose ``DJANGO_SETTINGS_MODULE`` default is
read from the file, as ``manage.py`` itself would set it.
"""
from __future__ import annotations

import os
import re
from typing import Mapping, NamedTuple, Sequence

from ..errors import ConfigError

#: manage.py's ``os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")``.
_SETDEFAULT = re.compile(
    r"""os\.environ\.setdefault\(\s*["']DJANGO_SETTINGS_MODULE["']\s*,\s*["']([\w.]+)["']""")


class Project(NamedTuple):
    settings: str            # the settings module, e.g. "mysite.settings"
    root: str                # the folder that goes first on sys.path (manage.py's)
    consumed: tuple[str, ...]  # the -r targets that named the project (not job code)


def find(require: Sequence[str] | None, cwd: str, environ: Mapping[str, str]) -> Project | None:
    """The Django project, or None when nothing names one (queued runs without Django)."""
    named = [r for r in require or () if _manage_py(r, cwd)]
    if named:
        manage = _manage_py(named[0], cwd)
        with open(manage, encoding="utf-8") as f:
            found = _SETDEFAULT.search(f.read())
        settings = environ.get("DJANGO_SETTINGS_MODULE") or (found and found.group(1))
        if not settings:
            raise ConfigError(f"{manage} does not set DJANGO_SETTINGS_MODULE; set it in the "
                              "environment")
        return Project(settings, os.path.dirname(manage), tuple(named))
    if environ.get("DJANGO_SETTINGS_MODULE"):
        return Project(environ["DJANGO_SETTINGS_MODULE"], cwd, ())
    return None


def _manage_py(target: str, cwd: str) -> str | None:
    path = os.path.normpath(target if os.path.isabs(target) else os.path.join(cwd, target))
    if os.path.basename(path) == "manage.py" and os.path.isfile(path):
        return path
    candidate = os.path.join(path, "manage.py")
    return candidate if os.path.isdir(path) and os.path.isfile(candidate) else None
