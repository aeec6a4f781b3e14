"""scripts/demo, the README's first command, run as a newcomer runs it (a copy of the script and
etc/ in a folder of their own, so its embedded Redis lives there): the daemon comes up and runs
jobs, and Ctrl-C stops the daemon too, even when the dashboard is gone already (a failed kill
of the dashboard ended the script's stop before the daemon's TERM, under set -e)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess

import psutil

from harness import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ctrl_c_stops_the_demo_daemon_even_with_its_dashboard_gone(tmp_path):
    # Given the demo, from a copy of the script and etc/, up and running jobs
    (tmp_path / "scripts").mkdir()
    shutil.copy(os.path.join(ROOT, "scripts", "demo"), tmp_path / "scripts" / "demo")
    shutil.copytree(os.path.join(ROOT, "etc"), tmp_path / "etc")
    out = tmp_path / "demo.log"
    master = None
    demo = subprocess.Popen([str(tmp_path / "scripts" / "demo")], stdout=out.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        wait_for(lambda: "the dashboard is at" in out.read_text()
                 and "queued.worker: done" in out.read_text(), 60, what="the demo up")
        (pid,) = map(int, re.findall(r"kill -TERM (\d+)\) to stop", out.read_text()))
        master = psutil.Process(pid)
        (web,) = [p for p in psutil.Process(demo.pid).children()
                  if "queued.admin.ctl" in " ".join(p.cmdline())]
        # When its dashboard is gone first, and then Ctrl-C reaches the script's group
        web.kill()
        web.wait(10)
        os.killpg(demo.pid, signal.SIGINT)
        # Then the script ends (130: interrupted) and the daemon has stopped gracefully
        assert demo.wait(60) == 130
        master.wait(60)
        assert "queued.master: bye" in out.read_text()
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
        if master is not None and master.is_running():  # (a daemon the bug left behind)
            master.send_signal(signal.SIGTERM)
            master.wait(60)
