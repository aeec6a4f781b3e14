"""A failed job's traceback as its author wants to read it: from the job's own code down.

A job runs under three or four of queued's frames (the worker's ``process``, the middleware
chain, a lambda); a failure's traceback started with them, in the log and in the
``error_backtrace`` Sidekiq's Web UI shows. Those leading frames are dropped, and so is the
frame of the SIGALRM handler that raises ``JobTimeout`` (the job was where the frame before it
is). Frames of queued's own code called *by* the job (a push from inside a job) stay: they say
where it failed. Paths under the working directory are shown relative to it.
"""
from __future__ import annotations

import os
import traceback
from types import TracebackType

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # queued/
_ALARM = os.path.join(_PACKAGE, "server", "timeout.py")


def _ours(frame: traceback.FrameSummary) -> bool:
    return frame.filename.startswith(_PACKAGE)


def job_frames(tb: TracebackType | None) -> traceback.StackSummary:
    """The frames of ``tb``, outermost first, without queued's leading frames and without the
    alarm handler's frame at the end. All of them if every frame is queued's (a queued bug)."""
    frames = list(traceback.extract_tb(tb))
    start = 0
    while start < len(frames) and _ours(frames[start]):
        start += 1
    end = len(frames)
    while end > start and frames[end - 1].filename == _ALARM:
        end -= 1
    kept = frames[start:end] if start < end else frames
    return traceback.StackSummary.from_list([_relative(f) for f in kept])


def _relative(frame: traceback.FrameSummary) -> traceback.FrameSummary:
    name = display_path(frame.filename)
    if name == frame.filename:
        return frame
    return traceback.FrameSummary(name, frame.lineno, frame.name, line=frame.line)


def display_path(filename: str) -> str:
    """``app/jobs.py`` for a file under the working directory, else the normalised path."""
    if filename.startswith("<"):
        return filename
    path = os.path.normpath(filename)
    try:
        cwd = os.getcwd()
    except OSError:
        return path
    if path.startswith(cwd + os.sep):
        return os.path.relpath(path, cwd)
    return path


def format_exception(exc: BaseException) -> str:
    """``Traceback (most recent call last): ...`` as Python prints it, with ``job_frames`` for
    the exception itself (the ones chained to it start where they were caught: no queued
    frames lead them)."""
    te = traceback.TracebackException.from_exception(exc)
    te.stack = job_frames(exc.__traceback__)
    return "".join(te.format()).rstrip("\n")
