"""What a non-editable install (pip install .) ships: every Lua script the code loads at
import time, or the installed package cannot even import (queued/admin's move.lua was left
out once: queued.api failed with FileNotFoundError outside a checkout)."""
from __future__ import annotations

import configparser
import fnmatch
import os
import re

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


#: The distribution's name on the package index: "queued" there is an unrelated project (its
#: 2019.12.24), so an install line naming it installs somebody else's code (issue 16).
DISTRIBUTION = "queued-jobs"
#: ``pip install`` and what it installs, up to the end of the command in prose or a shell line.
PIP_INSTALL = re.compile(r"pip3? install ([^`\n)#]*)")
WRONG = re.compile(r"""^['"]?queued(\[[^\]]*\])?['"]?$""")


def install_lines() -> list[tuple[str, str]]:
    """(file, the packages of a pip install) in the README, the docs, the scripts, the sample
    config and every message the code prints."""
    found = []
    paths = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "setup.cfg")]
    for folder, exts in (("docs", (".md",)), ("scripts", ("", ".py", ".sh")),
                         ("etc", (".yml", ".yaml")), ("queued", (".py",))):
        for base, _, names in os.walk(os.path.join(ROOT, folder)):
            paths += [os.path.join(base, n) for n in names
                      if os.path.splitext(n)[1] in exts and "peers" not in base]
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        found += [(os.path.relpath(path, ROOT), m.group(1)) for m in PIP_INSTALL.finditer(text)]
    return found


def test_setup_cfg_names_the_distribution_and_keeps_the_commands():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    assert cfg["metadata"]["name"] == DISTRIBUTION
    scripts = cfg["options.entry_points"]["console_scripts"].split()
    assert scripts[0::3] == ["queued", "queuedctl"]


def test_every_install_line_names_the_distribution():
    lines = install_lines()
    wrong = [(path, args) for path, args in lines
             if any(WRONG.match(word) for word in args.split())]
    assert wrong == []
    # and the headline ones do name it
    naming = {path for path, args in lines if DISTRIBUTION in args}
    assert {"README.md", "docs/queuedctl.md", "docs/dashboard.md", "docs/metrics.md",
            "queued/admin/ctlout.py", "queued/admin/ctlweb.py"} <= naming
