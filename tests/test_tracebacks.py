"""queued.server.tracebacks: a failure's traceback starts in the job's own code."""
from __future__ import annotations

import os

from queued.server import tracebacks
from queued.errors import JobTimeout
from queued.middleware import Chain
from queued.server.timeout import job_timeout


def failing():
    raise ValueError("in the job")


# The worker's frame that catches a job's exception is queued's own (runner.py); this helper
# is compiled under that file name so its frame looks the same.
_WORKER = compile("""
def run_like_a_worker(fn, chain, job_timeout):
    try:
        with job_timeout(None):
            chain.invoke(None, {}, "q", lambda: fn())
    except BaseException as e:
        return e
""", os.path.join(os.path.dirname(tracebacks.__file__), "runner.py"), "exec")
_scope: dict = {}
exec(_WORKER, _scope)


def run_like_a_worker(fn):
    return _scope["run_like_a_worker"](fn, Chain(), job_timeout)


def test_queueds_leading_frames_are_dropped():
    err = run_like_a_worker(failing)
    frames = tracebacks.job_frames(err.__traceback__)
    assert [f.name for f in frames] == ["failing"]


def test_a_timeout_shows_where_the_job_was_not_the_alarm_handler():
    import time

    def slow():
        time.sleep(5)

    try:
        with job_timeout(0.05):
            slow()
    except JobTimeout as e:
        names = [f.name for f in tracebacks.job_frames(e.__traceback__)]
    assert names[-1] == "slow"  # (the alarm handler's frame, queued's own, is gone)


def test_paths_under_the_working_directory_are_relative():
    here = os.path.abspath(__file__)
    assert tracebacks.display_path(here) == os.path.relpath(here)
    assert tracebacks.display_path("/usr/lib/python3/x.py") == "/usr/lib/python3/x.py"
    assert tracebacks.display_path("<string>") == "<string>"


def test_the_text_is_pythons_minus_the_dropped_frames():
    err = run_like_a_worker(failing)
    text = tracebacks.format_exception(err)
    assert text.startswith("Traceback (most recent call last):\n")
    assert text.endswith("ValueError: in the job")
    assert "middleware.py" not in text and "in failing" in text
