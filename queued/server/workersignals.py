"""A worker's own signals, and its death with its master.

The worker owns no signal but these (the master's INT, TSTP, USR1, HUP and QUIT are ignored:
a Ctrl-C or Ctrl-Z in the terminal reaches the whole process group). TERM means "finish the
jobs in hand, then exit 0"; USR2 reopens the log file (logrotate); TTIN writes this process's
Python stacks (every thread's, and the event loop's tasks) to the log (the master's TTIN asks
each worker in turn). The handlers only set flags (the loop acts), but for two things: while
the worker blocks in Redis, TERM and USR2 raise ``_Wake`` to stop waiting (the loop catches
it), and TTIN writes its record itself.

A part of Worker (worker.py), which holds the flags (``stopping``, ``reopen_logs``,
``blocking``) and the dispatcher's ``inbox`` these handlers tell.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
import traceback

from . import log as logsetup

log = logging.getLogger("queued.worker")

_PR_SET_PDEATHSIG = 1


class _Wake(BaseException):
    """Raised by the TERM and USR2 handlers only while blocked in Redis, to stop waiting."""


class WorkerSignals:
    def _install_signals(self) -> None:
        """In the fresh child: the worker's own handlers, the master's signals ignored."""
        for sig in (signal.SIGINT, signal.SIGTSTP, signal.SIGUSR1, signal.SIGHUP,
                    signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGTTIN, self._on_dump)
        signal.signal(signal.SIGUSR2, self._on_reopen)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        self._die_with_master()

    def _die_with_master(self) -> None:
        """Ask Linux to SIGKILL this worker when the master dies. It was a TERM, on which a
        worker finishes its job: but once the dead master's lease expires another master puts
        that job back and runs it, so a job longer than the lease ran twice at the same time.
        Killed at once, it runs again after the lease, once (at-least-once)."""
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        if os.getppid() != self.master_pid:
            self.stopping = True

    def _on_term(self, signum, frame):
        self.stopping = True
        self._wake()

    def _on_reopen(self, signum, frame):
        self.reopen_logs = True  # done by the loop: reopening takes the handler's lock
        self._wake()

    def _wake(self) -> None:
        if self.inbox is not None:  # the dispatcher waits there (SimpleQueue.put: reentrant)
            self.inbox.put(("wake",))
        if self.blocking:
            self.blocking = False
            raise _Wake()

    def _on_dump(self, signum, frame):
        """TTIN (the master asks each worker in turn): this process's Python stacks, every
        thread's, as one record in the log, labelled. Written in one write, without logging's
        lock, which the interrupted main thread may hold."""
        now = time.monotonic()
        doing = [f"{'' if v.record == 0 else f'lane {v.record} '}running {v.job_class} "
                 f"jid={v.jid} queue={v.queue} for {now - v.started:.1f}s"
                 for v in self.table.slot_views(self.slot) if v.busy]
        if self.dispatcher is not None:
            stacks = [f"Thread {threading.main_thread().name} (dispatcher):\n"
                      + "".join(traceback.format_stack(frame)).rstrip(),
                      self.dispatcher.pool.describe()]
        else:
            names = {t.ident: t.name for t in threading.enumerate()}
            stacks = []
            for ident, top in sys._current_frames().items():
                here = frame if ident == threading.main_thread().ident else top
                stacks.append(f"Thread {names.get(ident, ident)}:\n"
                              + "".join(traceback.format_stack(here)).rstrip())
        logsetup.write_record("INFO", log.name, f"TTIN worker {self.slot} pid={os.getpid()} "
                              f"{'; '.join(doing) or 'idle'}; stack:\n" + "\n".join(stacks))
