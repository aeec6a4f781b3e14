"""Rolling restart on HUP: the config file and the job code loaded again, then every worker
replaced, one at a time, each after the job in hand. No job is lost or run twice, pickup never
pauses (the other workers go on fetching, and a worker is asked to stop only once its successor
is up), and the master (the PID that systemd, a pidfile or supervisord knows) stays.

1. The config file is read again, from the same command line. A setting a running master
   cannot change (RESTART_ONLY: the slot count, the queues idle workers share out by position,
   the Redis it and every worker hold connections to, files it holds open) refuses the whole
   reload, in a line naming each: the daemon runs one config, the old one or the new one, never
   a mix (a deploy that moves jobs to a new namespace and ships code for it must not get the
   code without the namespace).
2. The master imports the job code again (appcode.AppCode.reload), in a thread while its loop
   goes on (loader.py says why and what the loop holds back meanwhile). If that fails,
   everything is put back, nothing changes, and the log says why; the workers run on. A
   setting that can fail to apply (``metrics:``, a new address to listen on) is prepared
   before, and refuses the reload if it cannot be applied.
3. The new settings go to the master's parts and to every worker forked from now on.
4. Each worker forked before the HUP, in slot order, is marked as leaving, which lets the
   master fork its successor into the spare slot (children.py). Once every other worker is up,
   the leaving one gets TERM: it finishes its job and exits (after ``shutdown_timeout`` it is
   killed and that job goes back to its queue); its slot is the next spare.

A second HUP during a rolling restart starts it over with what is on disk then: every worker
forked before it is replaced, the first restart's new ones included.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Callable

from ..errors import AppLoadError, ConfigError
from ..jobregistry import registry
from ..redisopts import mask_url
from . import periodic
from .children import Children
from .loader import Loading

log = logging.getLogger("queued.master")

#: Settings a HUP cannot change, and why.
RESTART_ONLY = {
    "concurrency": "the worker slots are made at start",
    "threads": "the worker slots' job lanes are made at start",
    "groups": "the worker slots and their lanes are made at start",
    "queues": "idle workers share the queues out by their position in the list",
    "redis_url": "the master and every worker hold connections to it",
    "namespace": "the master and every worker hold its keys",
    "embedded_redis": "the master runs that redis-server",
    "serve_no_jobs": "it decides whether there are workers at all",
    "pidfile": "the master wrote it at start",
    "logfile": "every process holds it open (USR2 reopens the same path)",
    "log_format": "every process formats its lines with it",
}
#: Fields of a Config that follow from others or from the command line (not compared).
DERIVED = ("config_file", "config_source", "environment", "section", "redis", "redis_source",
           "strict")


def compare(old, new) -> tuple[list[str], list[str]]:
    """(refused: ``key (old -> new): why`` for each RESTART_ONLY setting that changed,
    applied: ``key old -> new`` for the others)."""
    refused, applied = [], []
    for field in dataclasses.fields(old):
        name = field.name
        before, after = getattr(old, name), getattr(new, name)
        if name in DERIVED or before == after:
            continue
        if name in RESTART_ONLY:
            refused.append(f"{name} ({_show(before)} -> {_show(after)}): {RESTART_ONLY[name]}")
        else:
            applied.append(f"{name} {_show(before)} -> {_show(after)}")
    return refused, applied


def _show(value) -> str:
    if isinstance(value, str) and "://" in value:
        return mask_url(value)  # (a Redis URL's password stays out of the log)
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):  # queues
        return ",".join(f"{q}:{w}" for q, w in value)
    return repr(value) if isinstance(value, str) else str(value)


class Rollout:
    def __init__(self, children: Children, code, reread: Callable):
        self.children = children
        self.code = code        # appcode.AppCode (None: a master without job code to reload)
        self.reread = reread    # reads the config file again, as at start
        self.todo: list[int] = []        # pids of workers still to replace, in slot order
        self.leaving: int | None = None  # the one being replaced now
        self.started: float | None = None
        self.replaced = 0
        self.total = 0

    @property
    def active(self) -> bool:
        return self.started is not None

    def progress(self) -> str:
        """For the process title and systemd's STATUS=."""
        return f"rolling restart {self.replaced}/{self.total}" if self.active else ""

    # --- HUP ----------------------------------------------------------------------------
    def start_reload(self, config, why: str = "HUP", prepare: Callable | None = None,
                     wake: Callable[[], None] = lambda: None) -> Loading | None:
        """Steps 1 and 2: the config file read again and compared (refused: None, logged),
        the settings that can fail to apply prepared (``prepare(new)``: the metrics address
        bound; a ConfigError refuses the reload), then the job code imported again in a
        thread (loader.py) that calls ``wake`` when it ends. ``finish_reload`` then."""
        again = " (a rolling restart was under way: it starts over)" if self.active else ""
        log.info("%s: reloading the config file and the job code%s", why, again)
        try:
            new = self.reread()
        except ConfigError as e:
            log.error("%s: the config file does not load: %s; nothing changed, the workers "
                      "run on", why, e)
            return None
        refused, applied = compare(config, new)
        if refused:
            log.error("%s refused: %s. Restart queued to change %s; nothing was reloaded, the "
                      "workers run on", why, "; ".join(refused),
                      "it" if len(refused) == 1 else "them")
            return None
        try:
            change = prepare(new) if prepare is not None else None
        except ConfigError as e:
            log.error("%s refused: %s; nothing was reloaded, the workers run on", why, e)
            return None
        load = None if self.code is None else functools.partial(
            self.code.reload, new.require, new.serve_no_jobs, lambda: periodic.check(new))
        return Loading(new, why, applied, change, load, wake)

    def finish_reload(self, loading: Loading):
        """Once ``loading`` ended: the new config (the caller commits ``loading.change``), or
        None if the new code did not load (everything was put back; the change aborted)."""
        loading.join()
        why, e = loading.why, loading.error
        if e is not None:
            if loading.change is not None:
                loading.change.abort()
            if not isinstance(e, (AppLoadError, ConfigError)):
                e = f"{type(e).__name__}: {e}"
            log.error("%s: the new job code does not load: %s; nothing changed, the %d "
                      "worker(s) run on with the code they have", why, e,
                      len(self.children.workers))
            return None
        log.info("%s: job code loaded again in %.3fs (jobs: %s); config %s", why,
                 time.monotonic() - loading.started, ", ".join(registry.names()) or "none",
                 "changes: " + ", ".join(loading.applied) if loading.applied else "unchanged")
        return loading.config

    def reload(self, config, why: str = "HUP", prepare: Callable | None = None):
        """start_reload and finish_reload at once (the caller waits for the import); the
        new config with its change committed, or None."""
        loading = self.start_reload(config, why, prepare)
        if loading is None:
            return None
        new = self.finish_reload(loading)
        if new is not None and loading.change is not None:
            loading.change.commit()
        return new

    def begin(self, now: float) -> None:
        """Replace every worker forked before now (the master has the new code loaded)."""
        self.children.generation += 1
        self.todo = [rec.pid for rec in sorted(self.children.workers.values(),
                                               key=lambda rec: rec.slot) if not rec.leaving]
        self.replaced, self.total = 0, len(self.todo) + (self.leaving is not None)
        self.started = now if self.total else None
        if self.todo:
            log.info("rolling restart: replacing %d worker(s) one at a time, each after its "
                     "current job", len(self.todo))

    def cancel(self, why: str) -> None:
        """Quiet or stop: every worker is asked to stop anyway; none is replaced."""
        if self.active:
            log.info("rolling restart abandoned (%s) after %d of %d worker(s)", why,
                     self.replaced, self.total)
        for rec in self.children.workers.values():
            rec.stop_by = None  # the stop's own deadline governs now
        self.todo, self.leaving, self.started = [], None, None

    # --- the loop's step ------------------------------------------------------------------
    def step(self, now: float, shutdown_timeout: float) -> None:
        """Called on every turn of the master's loop (before it spawns) while active."""
        workers = self.children.workers
        if self.leaving is not None:
            rec = workers.get(self.leaving)
            if rec is None:  # it left (or died): its successor is up already
                self.leaving = None
                self.replaced += 1
                log.info("rolling restart: %d of %d worker(s) replaced", self.replaced,
                         self.total)
            else:
                if rec.stop_by is None and self.children.up():
                    self.children.retire(rec, now + shutdown_timeout)
                    log.info("rolling restart: worker %d (pid %d) is being replaced; it "
                             "finishes its job and leaves (%d of %d)", rec.slot, rec.pid,
                             self.replaced + 1, self.total)
                return
        while self.todo:
            rec = workers.get(self.todo.pop(0))
            if rec is not None and not rec.leaving:
                rec.leaving = True  # its successor is forked next (Children.spawn)
                self.leaving = rec.pid
                return
        log.info("rolling restart done in %.1fs: %d worker(s) replaced; every worker runs "
                 "the new code", now - self.started, self.replaced)
        self.started = None
