"""The job registry: job classes by name, the only classes a worker ever runs.

A ``queued.Job`` subclass registers itself the moment it is defined (job.py); a worker looks a
payload's ``class`` up here and never imports anything (server/runner.py), and so do the test
modes (queued.testing). The registry lives apart from the job API so that queued.testing
needs only this: job.py imports queued.testing (fake mode's ``HardWorker.jobs``, ``drain``
and ``clear``), and the two importing each other made a circle. ``queued.registry`` and
``queued.job.registry`` are this module's ``registry``.
"""
from __future__ import annotations

import threading
import warnings

from . import suggest


class JobNameClash(UserWarning):
    """Two classes registered under one job name. A warning in a plain Python process; the
    daemon makes it an error while it loads the job code (cli.load_app)."""


class Registry:
    """Job classes by name. Thread-safe; lookups are a dict read."""

    def __init__(self) -> None:
        self._classes: dict[str, type] = {}
        self._lock = threading.Lock()

    def register(self, cls: type, name: str | None = None) -> None:
        """Serve ``name`` (default: the class's registered name) with ``cls``. The same
        module+qualname replaces silently (a module reload); another class warns."""
        name = name or getattr(cls, "queued_name", None) or cls.__name__
        with self._lock:
            old = self._classes.get(name)
            self._classes[name] = cls
        if old is not None and old is not cls and (
                (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__)):
            warnings.warn(f"job name {name!r} is taken by two classes: {where(old)} and "
                          f"{where(cls)} (the second replaces the first)", JobNameClash,
                          stacklevel=3)

    def unregister(self, name: str) -> type | None:
        with self._lock:
            return self._classes.pop(name, None)

    def lookup(self, name: str) -> type | None:
        return self._classes.get(name)

    def snapshot(self) -> dict[str, type]:
        """Every name and class, to be put back with ``restore`` (a HUP's reload)."""
        with self._lock:
            return dict(self._classes)

    def restore(self, classes: dict[str, type]) -> None:
        with self._lock:
            self._classes = dict(classes)

    def names(self) -> list[str]:
        return sorted(self._classes)

    def missing(self, name: str) -> str:
        """Why a job of class ``name`` cannot run here, with the near names this process has
        (issue 20: "did you mean Billing::InvoiceJob?", not Ruby's "uninitialized constant")."""
        return (f"no job class named {name!r} is registered in this process"
                f"{suggest.did_you_mean(name, self.names())}")

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def __len__(self) -> int:
        return len(self._classes)


def where(cls: type) -> str:
    """``module.qualname``: how messages name a class."""
    return f"{cls.__module__}.{cls.__qualname__}"


registry = Registry()
