"""Helpers shared by the Sidekiq API, Web UI and ActiveJob interop tests.

``ruby_json(ruby, code, *args)`` runs a Ruby script (through the ``ruby`` fixture) whose
prelude connects Sidekiq's client to ARGV[0] and defines ``out(obj)``; it returns what the
script passed to ``out``, parsed. ``require_ruby(probe, what)`` skips locally / fails under
CI when a Ruby library beyond the sidekiq gem (activejob, rack, webrick) is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess

import pytest

IN_CI = bool(os.environ.get("CI"))
HERE = os.path.dirname(os.path.abspath(__file__))

#: What an interop daemon loads: the shared test jobs plus this directory's jobs.
INTEROP_REQUIRE = ("jobs.py", os.path.join(HERE, "interop_jobs.py"))

RUBY_PRELUDE = r'''
require "json"
require "logger"
require "sidekiq"
require "sidekiq/api"
$stderr.reopen(File::NULL) # redis-rb 4.8 prints a deprecation warning per command
Sidekiq.configure_client { |c| c.redis = {url: ARGV[0]} }
Sidekiq.logger.level = Logger::WARN
def out(obj)
  $stdout.puts("RESULT " + JSON.generate(obj))
  $stdout.flush
end
'''


def ruby_json(ruby, code: str, *args, timeout: float = 60):
    """Run ``RUBY_PRELUDE + code`` with ARGV = args; return the object it ``out``-ed."""
    proc = ruby(RUBY_PRELUDE + code, *args, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, f"expected one RESULT line from ruby, got:\n{proc.stdout}"
    return json.loads(lines[0][len("RESULT "):])


def require_ruby(probe: str, what: str) -> None:
    """Skip (locally) or fail (under CI) unless ``ruby -e probe`` succeeds."""
    path = shutil.which("ruby")
    ok = path is not None and subprocess.run(
        [path, "-e", probe], capture_output=True, timeout=60, check=False).returncode == 0
    if not ok:
        message = f"{what} is not installed (scripts/test installs it as root on Debian)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
