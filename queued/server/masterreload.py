"""The master's side of a HUP: the config file and the job code read again, then applied.

The new code loads in a thread (loader.py) while the loop goes on with the registries frozen
as they were (``app``); once it has loaded, the new settings go into the master's parts and
the rolling restart begins (rolling.py replaces the workers, one at a time, each after its
job). A master that went quiet or is stopping meanwhile applies nothing.

A part of Master (master.py), which holds ``loading``, ``hup_again`` and ``app``.
"""
from __future__ import annotations

import logging
import time

from .loader import LIVE, AppView
from .mastersignals import RUNNING
from .periodic import Periodic

log = logging.getLogger("queued.master")


class MasterReload:
    def _hup(self, why: str) -> None:
        """Rolling restart (rolling.py): the config file and the job code loaded again, then
        every worker replaced, one at a time, each after its job. Refused while quiet or
        stopping: those workers are not replaced anyway."""
        if self.state != RUNNING:
            log.info("%s ignored: this master is %s", why, self.state)
            return
        if self.loading is not None:
            log.info("%s: a reload is under way; the config and code are read again once it "
                     "ends", why)
            self.hup_again = why
            return
        self.loading = self.rollout.start_reload(self.config, why, self.jobmetrics.prepare,
                                                 self._wake)
        if self.loading is not None:
            self._use(self.loading.view)  # (the registries are the loader's until it ends)
            self._reloaded()  # (at once when there is no job code to import)

    def _reloaded(self) -> None:
        """A loop step: once a HUP's new code has loaded (its thread ended), apply the reload,
        unless the master went quiet or is stopping meanwhile."""
        loading = self.loading
        if loading is None or not loading.done:
            return
        self.loading = None
        self._use(LIVE)
        new = self.rollout.finish_reload(loading)
        if new is not None and self.state == RUNNING:
            if loading.change is not None:
                loading.change.commit()
            self._reconfigure(new)
            self.rollout.begin(time.monotonic())
        elif new is not None:
            log.info("%s: the new code loaded, but this master is %s: not applied",
                     loading.why, self.state)
            if loading.change is not None:
                loading.change.abort()
        if self.hup_again is not None:
            why, self.hup_again = self.hup_again, None
            self._hup(why)

    def _use(self, view: AppView) -> None:
        """The registries the loop's parts read: live, or frozen while a HUP's code loads."""
        self.app = view
        self.scheduler.chain = self.periodic.chain = view.client
        self.exits.app = None if view is LIVE else view

    def _reconfigure(self, config) -> None:
        """The settings a HUP may change, in the master's parts (rolling.RESTART_ONLY lists
        the others); workers forked from now on get them from _make_worker."""
        self.config = config
        self.lease_ms = int(config.lease_timeout * 1000)
        for part in (self.heartbeat, self.children):
            part.reconfigure(config)
        self.scheduler.config = self.exits.config = config
        self.periodic = Periodic(self.r, self.keys, config)  # (new schedules; synced at once)
        self.periodic.chain = self.app.client
        self.waker.horizon = config.fetch_timeout
        logging.getLogger("queued").setLevel(config.log_level)
        self.next_beat = 0.0  # a new tag or labels show at once
