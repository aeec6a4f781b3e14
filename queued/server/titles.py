"""Process titles, so ``ps`` shows what each process is doing (Sidekiq's PROCTITLES):
``queued 0.1.0 TAG [3 of 10 busy] stopping`` for the master, ``queued 0.1.0 TAG worker 3:
HardWorker`` for a worker (``... worker 3 [5 of 25 busy]`` for one of many jobs at once).
setproctitle is optional; without it titles are skipped."""
from __future__ import annotations

from .. import __version__

try:
    from setproctitle import setproctitle as _set
except ImportError:  # pragma: no cover - optional dependency
    def _set(title: str) -> None:
        pass


def _prefix(tag: str) -> str:
    return " ".join(p for p in ("queued", __version__, tag) if p)


def master_title(tag: str, busy: int, concurrency: int, state: str = "") -> str:
    return " ".join(p for p in (_prefix(tag), f"[{busy} of {concurrency} busy]", state) if p)


def master_status(busy: int, concurrency: int, state: str = "") -> str:
    """The same for systemd's STATUS= (``systemctl status`` shows it)."""
    return f"{busy} of {concurrency} busy" + (f"; {state}" if state else "")


def set_title(title: str) -> None:
    _set(_printable(title))


def _printable(text: str) -> str:
    # A job class named "\ud800" (a lone surrogate from a JSON escape) made setproctitle
    # raise UnicodeEncodeError, which crashed the worker before the job's failure path ran
    # (found by tests/faults).
    return text.encode("utf-8", "replace").decode("utf-8")


class WorkerTitle:
    """Changes the title only when what it says changes: setproctitle costs microseconds and
    a worker may run thousands of jobs a second."""

    def __init__(self, tag: str, slot: int):
        self.base = f"{_prefix(tag)} worker {slot}"
        self.current = None
        self._busy = None  # the class the title names now

    def _show(self, text: str, busy: str | None = None) -> None:
        self._busy = busy
        if text != self.current:
            self.current = text
            _set(_printable(text))

    def idle(self) -> None:
        self._show(f"{self.base}: idle")

    def busy(self, job_class: str) -> None:
        if job_class != self._busy:  # (once per job: no new text while the class repeats)
            self._show(f"{self.base}: {job_class}", job_class)

    def count(self, busy: int, lanes: int) -> None:
        """A worker of many jobs at once: ``queued 0.1.0 worker 3 [5 of 25 busy]``."""
        self._show(f"{self.base} [{busy} of {lanes} busy]")
