"""Fixtures for tests that talk to the real Ruby, PHP and Node ecosystems.

``ruby(code, *args)`` runs a Ruby script with Debian's Sidekiq 6.4 loadable; ``php(code, *args)``
runs a PHP script with the phpredis extension; ``node(code, *args)`` runs JavaScript with the
npm packages of tests/interop/node (ioredis) on its ``NODE_PATH``. Missing locally: the test is
skipped. Missing under CI: the test fails, because scripts/test installs them there.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

IN_CI = bool(os.environ.get("CI"))


HERE = os.path.dirname(os.path.abspath(__file__))
#: Where scripts/test installs the Node producer test's npm packages (npm ci).
NODE_MODULES = os.path.join(HERE, "node", "node_modules")


def _missing(what: str, how: str = "scripts/test installs it as root on Debian"):
    message = f"{what} is not installed ({how})"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _runner(binary: str, probe: list[str], what: str, flag: str, env: dict | None = None,
            how: str | None = None):
    path = shutil.which(binary)
    if path is None or subprocess.run([path, *probe], capture_output=True,
                                      env={**os.environ, **(env or {})}).returncode != 0:
        _missing(what, *(how,) if how else ())
    base_env = env or {}

    def run(code: str, *args: str, timeout: float = 60, check: bool = True,
            env: dict | None = None) -> subprocess.CompletedProcess:
        # UTF-8 whatever the machine's locale (CI may have none): scripts carry non-ASCII.
        utf8 = {"RUBYOPT": "-EUTF-8", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        proc = subprocess.run([path, flag, code, *map(str, args)], capture_output=True,
                              text=True, timeout=timeout,
                              env={**os.environ, **utf8, **base_env, **(env or {})})
        if check and proc.returncode != 0:
            raise AssertionError(f"{binary} failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
        return proc
    return run


@pytest.fixture(scope="session")
def ruby():
    return _runner("ruby", ["-e", 'require "sidekiq"'], "ruby with the sidekiq gem", "-e")


@pytest.fixture(scope="session")
def php():
    return _runner("php", ["-r", 'if (!class_exists("Redis")) exit(1);'],
                   "php with the redis extension", "-r")


@pytest.fixture(scope="session")
def node():
    return _runner("node", ["-e", 'require("ioredis")'], "node with ioredis in tests/interop/node",
                   "-e", env={"NODE_PATH": NODE_MODULES},
                   how="scripts/test installs it with npm ci, and Node with apt-get as root")
