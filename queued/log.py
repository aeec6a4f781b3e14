"""Logging: one line per event on stderr (or a file), UTC timestamps, Sidekiq's shape:
``2026-11-21T06:14:56.123Z pid=4242 tid=w3 INFO: message``."""
from __future__ import annotations

import logging
import os
import sys
import time


class Formatter(logging.Formatter):
    def __init__(self, tag: str = ""):
        super().__init__()
        self.tid = tag

    def formatTime(self, record, datefmt=None):  # noqa: N802 - logging's API
        t = time.gmtime(record.created)
        return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"

    def format(self, record):
        text = (f"{self.formatTime(record)} pid={record.process} tid={self.tid} "
                f"{record.levelname}: {record.getMessage()}")
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup(level: str = "INFO", logfile: str | None = None, tag: str = "master") -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = (logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stderr))
    handler.setFormatter(Formatter(tag))
    root.addHandler(handler)
    root.setLevel(level)


def retag(tag: str) -> None:
    """After fork: the same handlers, a worker's tid."""
    for h in logging.getLogger().handlers:
        if isinstance(h.formatter, Formatter):
            h.formatter.tid = tag


def pid_tag(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while pid:
        pid, d = divmod(pid, 36)
        out = digits[d] + out
    return out or "0"
