"""Logging: one line per event on stderr (or a file), UTC timestamps, Sidekiq's shape:
``2026-11-21T06:14:56.123Z pid=4242 tid=w3 INFO: message``.

The line a worker logs at the end of every job (``job_logging``, on by default as in Sidekiq)
is written by ``JobLog`` without the logging module's machinery (a LogRecord, the handler's
lock, the formatter, a flush per record: ~13 us a line here, a third of a no-op job's cost in
an outside run); ``JobLog`` formats the same text itself and hands it to the handler's file
descriptor in one write (~3 us). It does so only while queued's own handler is the one in
place; with any other logging setup it goes through ``logging`` like every other line.
"""
from __future__ import annotations

import logging
import os
import sys
import time


class _Seconds:
    """``2026-11-21T06:14:56`` for a time, recomputed once a second (strftime is slow)."""

    def __init__(self) -> None:
        self.second = -1
        self.text = ""

    def __call__(self, t: float) -> str:
        second = int(t)
        if second != self.second:
            self.second = second
            self.text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return self.text


class Formatter(logging.Formatter):
    def __init__(self, tag: str = ""):
        super().__init__()
        self.tid = tag
        self._seconds = _Seconds()

    def formatTime(self, record, datefmt=None):  # noqa: N802 - logging's API
        return f"{self._seconds(record.created)}.{int(record.msecs):03d}Z"

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


class JobLog:
    """The ``class=... jid=... elapsed=... done`` line of every finished job (see the module
    header). ``bind()`` after the handlers are final (in the worker, after fork)."""

    def __init__(self, name: str = "queued.worker"):
        self.logger = logging.getLogger(name)
        self.fd: int | None = None
        self.head = ""
        self._seconds = _Seconds()

    def bind(self) -> None:
        """Write directly when queued's own handler (our Formatter on a stream or a file) is
        the only one, and INFO lines of this logger would be written; else use logging."""
        self.fd = None
        handlers = logging.getLogger().handlers
        if len(handlers) != 1 or not self.logger.isEnabledFor(logging.INFO):
            return
        handler = handlers[0]
        formatter = handler.formatter
        if type(formatter) is not Formatter or not isinstance(handler, logging.StreamHandler) \
                or handler.filters or handler.level > logging.INFO \
                or not self._plain(self.logger):
            return
        try:
            handler.flush()
            self.fd = handler.stream.fileno()
        except (AttributeError, OSError, ValueError):  # a stream without a file descriptor
            return
        self.head = f"Z pid={os.getpid()} tid={formatter.tid} INFO: "

    @staticmethod
    def _plain(logger: logging.Logger) -> bool:
        """No filter or handler of its own between this logger and the root's handler."""
        while logger is not None and logger.name != "root":
            if logger.filters or logger.handlers or not logger.propagate:
                return False
            logger = logger.parent
        return True

    def done(self, job_class: str, jid: str, elapsed: float) -> None:
        if self.fd is None:
            self.logger.info("class=%s jid=%s elapsed=%.3f done", job_class, jid, elapsed)
            return
        now = time.time()
        line = (f"{self._seconds(now)}.{int(now % 1 * 1000):03d}{self.head}"
                f"class={job_class} jid={jid} elapsed={elapsed:.3f} done\n")
        try:
            os.write(self.fd, line.encode("utf-8", "replace"))
        except OSError:
            self.fd = None  # logging reports the problem its own way from now on
            self.logger.info("class=%s jid=%s elapsed=%.3f done", job_class, jid, elapsed)
