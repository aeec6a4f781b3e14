"""A HUP's new job code, imported and checked in a helper thread of the master while its loop
goes on (issue 16.2). Imported in the loop, an 8 s import (a Django app takes that) stalled
every step with it: the heartbeat went stale, a job due in 2 s was moved to its queue 6 s late,
a worker that died was not seen, and with the shipped ``WatchdogSec=10`` an import of 10 s or
more had systemd kill the master in the middle of the reload.

Why a thread. A child process could import and check the new code without stalling anything,
but the master must hold the code itself to fork workers from it (they share it copy-on-write,
and a worker forked later must get what its siblings run: appcode.py), so it would then import
it again, in the loop, and stall as before. The import runs in the master, in a thread.

What the thread touches, and what the loop must not do meanwhile:
- fork. ``fork()`` copies into the child whatever locks another thread holds at that instant
  (the import lock of the module being imported, logging's handler locks, a redis-py pool's),
  where they are never released (DESIGN.md's fork hazards). So while the thread lives the
  master forks nothing: no worker is spawned or respawned and a rolling restart does not step;
  both resume once it has ended, after its ``join``, when it holds nothing. (The embedded
  redis-server's restart goes through subprocess, which execs at once: no Python runs in that
  child, so it is safe.) A worker that dies during an import is therefore replaced once the
  import ends.
- the registries job code fills as it is imported (job classes, client middleware, lifecycle
  and error handlers): the thread empties them to their state before any job code and fills
  them again (appcode.AppCode.reload). The loop's steps that read them (due jobs and periodic
  jobs pushed through client middleware, a dead worker's job failed by the master with its
  class's retry policy and the error handlers, lifecycle events) read ``AppView``: a frozen
  copy of what they held when the reload began, so the old code's runs on until the new is
  committed, never a half-imported mix. On a failed import the thread puts everything back.
- process-wide state a thread cannot keep to itself: ``sys.path`` and the warnings filters
  (load_app's JobNameClash check) change for the import's duration; the loop imports no job
  code and warns about nothing, so it does not notice.

The thread ends by writing a byte 0 into the master's wakeup pipe, which the loop reads with
the signal numbers (0 is none), so the reload is applied on the next turn.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, NamedTuple

from .. import events
from ..jobregistry import registry
from ..middleware import Chain, client_middleware

log = logging.getLogger("queued.master")


class AppView(NamedTuple):
    """What the master's loop reads of the registries that job code fills."""
    lookup: Callable[[str], type | None]
    client: Chain
    fire: Callable[[str], None]
    report: Callable[[BaseException, dict], None]


LIVE = AppView(registry.lookup, client_middleware, events.fire, events.report)


def frozen() -> AppView:
    """A copy of what the registries hold now, for the loop while a reload rebuilds them."""
    classes = registry.snapshot()
    chain = Chain()
    chain.restore(client_middleware.snapshot())
    handlers, errors = events.snapshot()
    return AppView(classes.get, chain, lambda event: events.fire(event, handlers),
                   lambda exc, context: events.report(exc, context, errors))


class Loading:
    """One HUP's reload past its config step: the new code importing in a thread (or done at
    once: a master without job code). ``error`` once it ended: None, or why it failed."""

    def __init__(self, config, why: str, applied: list[str], change, load: Callable | None,
                 wake: Callable[[], None]):
        self.config, self.why, self.applied, self.change = config, why, applied, change
        self.started = time.monotonic()
        self.error: BaseException | None = None
        self.view = frozen()
        self.thread: threading.Thread | None = None
        if load is not None:
            self.thread = threading.Thread(target=self._run, args=(load, wake),
                                           name="hup-loader", daemon=True)
            self.thread.start()

    def _run(self, load: Callable, wake: Callable[[], None]) -> None:
        try:
            load()
        except BaseException as e:  # noqa: BLE001 - reported by the loop (rolling.finish)
            self.error = e
        finally:
            wake()

    @property
    def done(self) -> bool:
        return self.thread is None or not self.thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread (True once it has ended)."""
        if self.thread is not None:
            self.thread.join(timeout)
        return self.done
