"""Run ``queuedctl`` as an operator does: a subprocess (``python -m queued.admin.ctl``, from this
checkout), its stdout, stderr and exit status. Its stdout is a pipe, so listings come one line
per row (``rows`` reads them); tables drawn on a terminal (tests/test_ctl.py's ``in_terminal``)
are 200 columns wide ($COLUMNS). ``REDIS_URL`` is taken out of the environment unless a test
gives it."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from harness import ROOT

WIDTH = "200"


def ctl_env(env: dict | None = None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "COLUMNS", "LINES")}
    base["PYTHONPATH"] = os.pathsep.join(
        p for p in (ROOT, *os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p)
    base["COLUMNS"] = WIDTH
    base["PYTHONIOENCODING"] = "utf-8"  # rich draws its boxes whatever the locale
    base.update(env or {})
    return base


def ctl(*args: str, url: str | None = None, env: dict | None = None, stdin=subprocess.DEVNULL,
        cwd: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``queuedctl [--redis url] args...``; never raises on a non-zero exit."""
    argv = [sys.executable, "-m", "queued.admin.ctl", *(("--redis", url) if url else ()),
            *args]
    return subprocess.run(argv, capture_output=True, text=True, env=ctl_env(env),
                          stdin=stdin, cwd=cwd or ROOT, timeout=timeout)


def ctl_json(*args: str, url: str | None = None, status: int = 0, **kw):
    """The one JSON document ``queuedctl ... --json`` prints, once its exit status is
    ``status``."""
    proc = ctl(*args, "--json", url=url, **kw)
    assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr)
    return json.loads(proc.stdout)


def ok(*args: str, url: str | None = None, **kw) -> str:
    """The stdout of a run that must succeed (exit 0) with nothing on stderr."""
    proc = ctl(*args, url=url, **kw)
    assert (proc.returncode, proc.stderr) == (0, ""), (proc.returncode, proc.stderr)
    return proc.stdout


def columns(listing: str) -> list[str]:
    """The header of a plain listing (queuedctl's output off a terminal)."""
    return [m.group() for m in re.finditer(r"\S+(?: \S+)*", listing.splitlines()[0])]


def rows(listing: str) -> list[list[str]]:
    """The rows of a plain listing (queuedctl's output off a terminal: a header line, then
    one line per row, columns left-aligned two spaces apart), each as its cells, cut at the
    columns the header's names start at."""
    lines = listing.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", lines[0])]
    bounds = list(zip(starts, [*starts[1:], None]))
    return [[line[a:b].strip() for a, b in bounds] for line in lines[1:] if line]


def box_rows(table: str) -> list[list[str]]:
    """The body rows of a rich table (box characters stripped), each as its cells."""
    out = []
    for line in table.splitlines():
        if line.startswith("│"):
            out.append([c.strip() for c in line.strip("│").split("│")])
    return out
