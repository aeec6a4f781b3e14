"""The master's timed steps: when its loop wakes, what it does on a timer, what it shows.

The loop sleeps until a signal arrives or the next timer is due (``_wait``): the scheduler
and the periodic jobs (while running), the heartbeat (which renews the lease and reaps the
masters whose lease expired), the shutdown deadline, the TTIN dumps, the waker, a worker to
kill, systemd's watchdog, jobs to give back. The process title and systemd's STATUS= come
from the slot table on every turn; READY=1 once every worker is up.

The master's Redis steps retry on the next turn when Redis is away or refuses, logged once
per outage (``_redis_error``).

A part of Master (master.py), which holds the timers' state (``next_beat``, ``next_dump``,
``redis_down_since``, ``shown_title``) and the parts they tick.
"""
from __future__ import annotations

import logging
import select
import signal
import time

import redis

from . import recovery, titles
from .mastersignals import QUIET, RUNNING, STOPPING

log = logging.getLogger("queued.master")

#: Longest the loop sleeps, so every timer is noticed within it (seconds).
TICK = 1.0
#: Seconds between two workers' stack dumps after TTIN, so they come in slot order.
DUMP_GAP = 0.2


class MasterTimers:
    def _wait(self, timeout: float | None = None) -> None:
        if timeout is None:
            now = time.monotonic()
            timeout = min(TICK, max(0.0, self.next_beat - now))
            # Only the timers that will fire: the scheduler is not ticked unless running, and
            # a deadline passes once. Counting them after that made a quiet or stopping
            # master spin at 100% CPU (a zero timeout for ever).
            if self.state == RUNNING:
                timeout = min(timeout, self.scheduler.due_in(now))
                cron = self.periodic.due_in()  # (wall clock: ticks are times of day)
                if cron is not None:
                    timeout = min(timeout, cron)
            if self.deadline is not None and self.deadline > now:
                timeout = min(timeout, self.deadline - now)
            if self.dumps:
                timeout = min(timeout, max(0.0, self.next_dump - now))
            for due in (self.waker.due_in(now), self.children.next_kill_in(now),
                        self.notify.due_in(now), self.giveback.due_in(now)):
                if due is not None:
                    timeout = min(timeout, due)
        try:
            select.select([self.wake_r, *self.waker.fds()], [], [], timeout)
        except InterruptedError:
            pass

    def _timers(self) -> None:
        now = time.monotonic()
        self.notify.tick(now)
        if self.dumps and now >= self.next_dump:
            pid = self.dumps.pop(0)
            if pid in self.workers:
                self.children.kill(pid, signal.SIGTTIN)
                self.next_dump = now + DUMP_GAP
        if self.state == RUNNING:
            try:
                self.periodic.tick()
            except (redis.RedisError, OSError) as e:  # see _redis_error
                self._redis_error("push periodic jobs", e)
                self.periodic.backoff()
            try:
                self.scheduler.tick(now)
            except (redis.RedisError, OSError) as e:  # see _redis_error
                self._redis_error("poll the schedule", e)
                self.scheduler.next_poll = now + 1.0
        if now >= self.next_beat:
            self.next_beat = now + self.config.heartbeat_interval
            self._beat()

    def _show_title(self, state: str | None = None) -> None:
        """The master's process title, from the slot table: on every turn of the loop (it
        lagged the workers by up to a heartbeat), set only when its text changes; systemd's
        STATUS= says the same."""
        busy = self.table.busy_count()
        if state is None:
            state = self._state_text()
        text = titles.master_title(self.config.tag, busy, self.config.jobs_at_once, state)
        if text != self.shown_title:
            self.shown_title = text
            titles.set_title(text)
            self.notify.status(self._status(busy, state))

    def _status(self, busy: int | None = None, state: str | None = None) -> str:
        if busy is None:
            busy = self.table.busy_count()
        if state is None:
            state = self._state_text()
        return titles.master_status(busy, self.config.jobs_at_once, state)

    def _state_text(self) -> str:
        if self.state == RUNNING:
            return self.rollout.progress()
        return {QUIET: "quiet", STOPPING: "stopping"}[self.state]

    def _announce_ready(self) -> None:
        """READY=1 for systemd once every worker is up (has written its record), once."""
        if not self.notify.ready_sent and self.state == RUNNING and self.children.up():
            self.notify.ready(self._status())

    def _beat(self) -> None:
        views = self.table.views()
        try:
            remote = self.heartbeat.beat(views, self.state != RUNNING, self.lease_ms,
                                         list(self.workers))
            if self.heartbeat.lapse:  # frozen or cut off past the lease (heartbeat._lapse)
                log.warning("%s", self.heartbeat.lapse)
            if self.state == RUNNING:
                self.scheduler.elect()
            self._reap_expired()
            self.exits.write_held()
            self.jobmetrics.flush()
        except (redis.RedisError, OSError) as e:  # see _redis_error
            self._redis_error("heartbeat", e)
            return
        log.debug("heartbeat: %d of %d busy; lease renewed for %gs%s",
                  sum(1 for v in views if v.busy), self.config.jobs_at_once,
                  self.config.lease_timeout, "; scheduler leader" if self.scheduler.leader else "")
        if self.redis_down_since is not None:
            log.info("Redis is back after %.1fs", time.monotonic() - self.redis_down_since)
            self.redis_down_since = None
        self.app.fire("heartbeat")
        if remote:
            log.info("remote signal %s received", remote)
            {"TSTP": self.quiet, "USR1": self.quiet, "TERM": self.stop,
             "TTIN": self.dump}.get(remote, lambda why: None)(f"remote {remote}")

    def _reap_expired(self) -> None:
        for identity, moved in recovery.reap_expired(self.r, self.keys):
            log.warning("master %s stopped renewing its lease; %d of its job(s) put back in "
                        "their queues", identity, moved)

    def _redis_error(self, what: str, err: Exception) -> None:
        """Redis unreachable, or refusing commands (NOREPLICAS, MISCONF when its disk is
        full, READONLY after a failover, OOM): the master's Redis steps retry, logged once.
        A refusal used to escape the loop and end the master (tests/faults)."""
        if self.redis_down_since is None:
            self.redis_down_since = time.monotonic()
            what_happened = ("Redis unreachable" if isinstance(
                err, (redis.ConnectionError, redis.TimeoutError, OSError))
                else "Redis refused a command")
            log.error("%s (%s: %s); retrying with backoff", what_happened, what, err)
