"""A daemon run the way a person runs it from a shell in a terminal.

``TerminalDaemon`` starts a stand-in for an interactive shell in a session of its own whose
controlling terminal is a fresh pseudo-terminal; like a job-control shell it starts ``queued``
in a process group of its own and hands it the terminal's foreground. So the master's process
group (the master and every worker it forks) is the foreground group, and not an orphaned one
(its parent, the shell, is in the same session), as under bash: ``type(CTRL_C)`` is a Ctrl-C
typed there, and the terminal's line discipline, not the test, sends SIGINT to the whole group
(``CTRL_Z``: SIGTSTP, which stops any process of the group that does not handle it).
"""
from __future__ import annotations

import fcntl
import os
import pty
import subprocess
import sys
import termios

import psutil

from harness import Daemon, wait_for

CTRL_C, CTRL_Z = b"\x03", b"\x1a"

#: The shell: runs argv in a new process group in the terminal's foreground, waits for it to
#: end, exits with its status.
SHELL = r'''
import os, signal, sys
signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # tcsetpgrp from what becomes a background group
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    os.tcsetpgrp(0, os.getpid())
    signal.signal(signal.SIGTTOU, signal.SIG_DFL)  # as a shell leaves it for its jobs
    os.execv(sys.argv[1], sys.argv[1:])
try:
    os.setpgid(pid, pid)  # (both sides, as a shell does: whichever runs first)
except PermissionError:
    pass  # EACCES: the child has exec'd already, having set its group itself (bash ignores it)
while True:
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) or os.WIFSIGNALED(status):
        sys.exit(os.waitstatus_to_exitcode(status) % 256)
'''


def _take_terminal() -> None:
    """In the shell, after setsid (start_new_session): make stdin, the pty's slave side, the
    session's controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class TerminalDaemon(Daemon):
    def start(self, *extra: str, wait=True) -> "TerminalDaemon":
        self.pty_master, slave = pty.openpty()
        self.log = open(self.logpath, "ab")
        argv = [sys.executable, "-c", SHELL, *self.program, *self.args, *extra]
        try:
            self.proc = subprocess.Popen(argv, stdin=slave, stdout=self.log,
                                         stderr=subprocess.STDOUT, env=self.environ(),
                                         cwd=self.cwd,
                                         start_new_session=True, preexec_fn=_take_terminal)
        finally:
            os.close(slave)
        self._master_pid = wait_for(self._forked, 10, what="the shell to start queued")
        if wait:
            self.wait_up()
        return self

    def _forked(self) -> int | None:
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return None
        return children[0].pid if children else None

    @property
    def pid(self) -> int:
        """The queued master's pid (the shell's child)."""
        return self._master_pid

    def type(self, keys: bytes) -> None:
        os.write(self.pty_master, keys)

    def foreground_group(self) -> int:
        return os.tcgetpgrp(self.pty_master)

    def cleanup(self) -> None:
        super().cleanup()
        if getattr(self, "pty_master", None) is not None:
            os.close(self.pty_master)
            self.pty_master = None
