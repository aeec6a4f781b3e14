"""The master's signals, and what each asks of it: stop, quiet, dump stacks, reopen logs.

Signal handlers only record: Python's wakeup fd writes the signal number into a pipe and the
loop reads it (``_handle_signals``), then acts on each in order of arrival (``_dispatch``).
The master owns every signal: TERM/INT stop, USR1/TSTP quiet, TTIN dumps, HUP reloads
(masterreload.py), USR2 reopens the log file. A remote signal (read by the heartbeat:
mastertimers.py) asks the same methods.

A part of Master (master.py), which holds the state these methods move: ``state`` (RUNNING,
then QUIET or STOPPING: never back), ``deadline``, the workers (children.py) and ``dumps``;
the wakeup pipe is made here (``_install_signals``) and woken by the loader too (``_wake``).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback

import redis

from . import log as logsetup

log = logging.getLogger("queued.master")

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGTSTP, signal.SIGTTIN,
           signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR2)

RUNNING, QUIET, STOPPING = "running", "quiet", "stopping"


class MasterSignals:
    def _install_signals(self) -> None:
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        for sig in SIGNALS:
            signal.signal(sig, lambda signum, frame: None)  # the wakeup fd does the recording

    def _wake(self) -> None:
        """From the loader thread: a byte 0 into the wakeup pipe (no signal: a turn)."""
        try:
            os.write(self.wake_w, b"\0")
        except (AttributeError, OSError):
            pass  # (full, or a Master whose loop never ran: it wakes anyway)

    def _handle_signals(self) -> None:
        try:
            data = os.read(self.wake_r, 512)
        except BlockingIOError:
            return
        for signum in data:
            self._dispatch(signum)

    def _dispatch(self, signum: int) -> None:
        handler = {signal.SIGTERM: self.stop, signal.SIGINT: self.stop,
                   signal.SIGUSR1: self.quiet, signal.SIGTSTP: self.quiet,
                   signal.SIGTTIN: self.dump, signal.SIGHUP: self._hup,
                   signal.SIGUSR2: self.reopen_logs}.get(signum)
        if handler:
            handler(signal.Signals(signum).name)

    def quiet(self, why: str = "TSTP") -> None:
        """Stop fetching, let running jobs finish (workers exit after their job)."""
        if self.state != RUNNING:
            return
        log.info("%s: quiet; running jobs finish, no new jobs are fetched", why)
        self.state = QUIET
        self.rollout.cancel("quiet")
        self.app.fire("quiet")
        self._signal_workers(signal.SIGTERM)
        self._resign()
        self.next_beat = 0.0

    def stop(self, why: str = "TERM") -> None:
        """Graceful stop against one deadline; a second stop request hurries it."""
        if self.state == STOPPING:
            log.info("%s again: stopping now; running jobs go back to their queues", why)
            self.deadline = time.monotonic()
            return
        log.info("%s: shutting down; waiting up to %gs for running jobs", why,
                 self.config.shutdown_timeout)
        self.state = STOPPING
        self.rollout.cancel("stopping")
        self.notify.stopping(self._status())
        self.deadline = time.monotonic() + self.config.shutdown_timeout
        self._signal_workers(signal.SIGTERM)
        self._resign()
        self.next_beat = 0.0

    def reopen_logs(self, why: str = "USR2") -> None:
        """Reopen ``logfile:`` (logrotate moved it away), here and in every worker."""
        logsetup.reopen()
        log.info("%s: log file reopened; asking the workers to do the same", why)
        self._signal_workers(signal.SIGUSR2)

    def dump(self, why: str = "TTIN") -> None:
        """Log the master's stack and each worker's job and runtime, then ask each worker for
        its Python stack (one labelled record each, in slot order: one at a time, DUMP_GAP
        apart, so nothing interleaves)."""
        stacks = "\n".join(f"Thread {t.name}:\n" + "".join(
            traceback.format_stack(sys._current_frames()[t.ident])).rstrip()
            for t in threading.enumerate() if t.ident in sys._current_frames())
        log.info("TTIN master pid=%d (%s); stack:\n%s", os.getpid(), why, stacks)
        for rec in sorted(self.workers.values(), key=lambda w: w.slot):
            busy = [v for v in self.table.slot_views(rec.slot) if v.busy]
            for v in busy:
                log.info("TTIN worker %d%s pid=%d running %s jid=%s queue=%s for %.1fs",
                         rec.slot, f" lane {v.record}" if v.record else "", rec.pid,
                         v.job_class, v.jid, v.queue, time.monotonic() - v.started)
            if not busy:
                log.info("TTIN worker %d pid=%d idle", rec.slot, rec.pid)
            if rec.pid not in self.dumps:
                self.dumps.append(rec.pid)

    def _resign(self) -> None:
        try:
            self.scheduler.resign()
        except (redis.RedisError, OSError):
            pass
