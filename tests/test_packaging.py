"""What a non-editable install (pip install .) ships: every Lua script the code loads at
import time, or the installed package cannot even import (queued/admin's move.lua was left
out once: queued.api failed with FileNotFoundError outside a checkout)."""
from __future__ import annotations

import configparser
import fnmatch
import os

from harness import ROOT


def test_every_lua_script_is_package_data():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    shipped = {package: value.split() for package, value in cfg["options.package_data"].items()}
    missing = []
    for folder, _, files in os.walk(os.path.join(ROOT, "queued")):
        for name in files:
            if not name.endswith(".lua"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), ROOT).split(os.sep)
            # the nearest package above the file, and the file's path relative to it
            for cut in range(len(rel) - 1, 0, -1):
                package, inside = ".".join(rel[:cut]), "/".join(rel[cut:])
                if os.path.isfile(os.path.join(ROOT, *rel[:cut], "__init__.py")):
                    break
            if not any(fnmatch.fnmatch(inside, p) for p in shipped.get(package, ())):
                missing.append(f"{package}: {inside}")
    assert missing == []


def test_the_dashboards_templates_and_static_files_are_package_data():
    """The dashboard renders from queued/admin/web/templates and serves static/: a wheel
    without them imports but answers every page with an error."""
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    patterns = cfg["options.package_data"]["queued.admin.web"].split()
    web = os.path.join(ROOT, "queued", "admin", "web")
    missing = []
    for sub in ("templates", "static"):
        names = os.listdir(os.path.join(web, sub))
        assert names, f"{sub}/ is empty"
        missing += [f"{sub}/{n}" for n in names
                    if not any(fnmatch.fnmatch(f"{sub}/{n}", p) for p in patterns)]
    assert missing == []
