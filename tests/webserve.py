"""``queuedctl web`` as an operator runs it: the real command in a subprocess on a free loopback
port (uvicorn, one decoding of the path, as in production), for the tests that drive it over
HTTP (test_web.py) or in Chromium (test_web_browser.py). Stopped by PID."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Iterator

import httpx

from conftest import free_port
from harness import ROOT, wait_for


@contextlib.contextmanager
def serve(redis_url: str, log_path: str, *args: str, port: int | None = None,
          host: str = "127.0.0.1") -> Iterator[str]:
    """``queuedctl web --redis URL --bind HOST:PORT ARGS...``; yields its base URL."""
    port = port or free_port()
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("REDIS_URL", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "queued.admin.ctl", "web", "--redis",
                                 redis_url, "--bind", f"{host}:{port}", *args],
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        base = f"http://{host}:{port}"

        def up():
            try:
                return httpx.get(base + "/stats", timeout=1).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None  # died: stop waiting, the assert says so
        try:
            wait_for(up, 20, what="queuedctl web to answer")
            assert proc.poll() is None, open(log_path).read()
            yield base
        finally:
            proc.terminate()
            proc.wait(10)
