"""Run a real ``queued`` daemon in a subprocess, as an operator would, and watch it."""
from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import redis
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def wait_for(predicate, timeout=10.0, interval=0.02, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_closed_by_server(sock) -> None:
    """Until the server's close of ``sock`` has reached it (the socket reads as end of file)."""
    def closed():
        readable, _, _ = select.select([sock], [], [], 0.05)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""

    wait_for(closed, what="the server's close to reach our socket")


def counts(r, key) -> dict[str, int]:
    """A ``t:`` hash of jid -> count (jobs.RUNS, jobs.DONE) as {jid: int}."""
    return {k.decode(): int(v) for k, v in r.hgetall(key).items()}


def zmembers(r, key) -> list[tuple[bytes, float]]:
    """A zset (retry, dead, schedule) as [(member bytes, score)], lowest score first."""
    return r.zrange(key, 0, -1, withscores=True)


def zjobs(r, key) -> list[dict]:
    """The JSON members of a zset, decoded (key order kept)."""
    return [json.loads(m) for m, _ in zmembers(r, key)]


def worker_connections(r, blocked: bool = False) -> list[dict]:
    """The workers' own Redis connections (CLIENT LIST, named ``queued-worker-<slot>``);
    with ``blocked``, only those waiting in a blocking command (flag ``b``)."""
    return [c for c in r.client_list() if c.get("name", "").startswith("queued-worker-")
            and (not blocked or "b" in c["flags"])]


class Monitor:
    """Redis MONITOR in a thread: the commands Redis ran, in order, as (client "ip:port",
    command), and when (``timed``: Redis's clock). Used to see which queue an idle worker's
    BLMOVE waits on, which CLIENT LIST does not say. Close it when done."""

    def __init__(self, url: str):
        self.r = redis.Redis.from_url(url)
        self._seen: list[tuple[str, str]] = []
        self._times: list[float] = []
        self._lock = threading.Lock()
        self._stop = f"queued-test-monitor-stop-{os.getpid()}-{time.time_ns()}"
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise AssertionError("MONITOR did not start")

    def _run(self, started: threading.Event) -> None:
        with self.r.monitor() as m:
            started.set()
            for c in m.listen():
                with self._lock:
                    self._seen.append((f"{c['client_address']}:{c['client_port']}",
                                       c["command"]))
                    self._times.append(float(c["time"]))
                if c["command"] == f"ECHO {self._stop}":
                    return

    def commands(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._seen)

    def sync(self) -> list[tuple[str, str]]:
        """Every command Redis ran before this call, once the thread has read them all."""
        token = f"ECHO queued-test-monitor-sync-{time.time_ns()}"
        start = len(self.commands())
        self.r.echo(token.split()[1])
        return wait_for(lambda: any(cmd == token for _, cmd in self.commands()[start:])
                        and self.commands(), 10, what="MONITOR to catch up")

    def timed(self) -> list[tuple[float, str, str]]:
        """sync()'s commands as (time Redis ran it, client "ip:port", command): Redis's
        clock, which the masters on this host share."""
        seen = self.sync()
        with self._lock:
            return [(t, addr, cmd) for t, (addr, cmd) in zip(self._times, seen)]

    def blocked_on(self) -> dict[str, str]:
        """The queue each blocked worker connection waits on: {connection name: queue}."""
        blocked = worker_connections(self.r, blocked=True)
        seen = self.sync()  # after CLIENT LIST: the BLMOVEs it saw blocked are all in here
        out = {}
        for c in blocked:
            waits = [cmd.split()[1] for addr, cmd in seen
                     if addr == c["addr"] and cmd.startswith("BLMOVE ")]
            if waits:
                out[c["name"]] = waits[-1].split(":", 1)[1]
        return out

    def close(self) -> None:
        self.r.echo(self._stop)
        self._thread.join(10)
        self.r.close()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie's sockets are closed)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def local_addresses(pid: int) -> list[tuple[str, int]]:
    """The local (ip, port) of each TCP socket of a process (a Redis client's ``addr`` in
    CLIENT LIST)."""
    try:
        p = psutil.Process(pid)
        conns = p.net_connections("tcp") if hasattr(p, "net_connections") else p.connections()
    except psutil.Error:
        return []
    return [(c.laddr.ip, c.laddr.port) for c in conns if c.laddr]


def title(pid: int) -> str:
    """A process's title as ps shows it (setproctitle rewrites /proc/<pid>/cmdline)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


#: A worker's process title (titles.WorkerTitle): ``queued <version> [tag] worker <slot>: ...``,
#: or with threads ``... worker <slot> [0 of 5 busy]``.
WORKER_TITLE = re.compile(r"^queued \S+ (?:.* )?worker \d+(?:: | \[\d+ of \d+ busy\])")

# What pip writes for the console script `queued` (setup.cfg entry point): run as a file, so
# sys.path[0] is its own folder, not the working directory, as for an installed `queued`.
CONSOLE_SCRIPT = """import sys
from queued.server.cli import main
sys.exit(main())
"""


class Daemon:
    """One ``queued`` process. By default it reads a config file written here from
    ``settings`` (``-C``); ``args`` replaces that command line (no file is written). It runs
    in ``cwd`` (default: tmp_path, so relative paths never land in the repository), with
    ``REDIS_URL`` taken out of the inherited environment unless ``env`` gives it. With
    ``console`` it runs as the installed ``queued`` script does rather than ``python -m``."""

    def __init__(self, redis_url: str, tmp_path, require=("jobs.py",), env=None, *, args=None,
                 cwd=None, console=False, **settings):
        self.redis_url = redis_url
        self.env = dict(env or {})
        self.dir = str(tmp_path)
        self.cwd = str(cwd or tmp_path)
        stem = os.path.join(self.dir, f"queued-{time.time_ns()}")
        self.config = None
        if args is None:
            data = {"redis_url": redis_url, "concurrency": 2, "heartbeat_interval": 0.5,
                    "require": [os.path.join(HERE, r) for r in require], **settings}
            self.config = stem + ".yml"
            with open(self.config, "w") as f:
                yaml.safe_dump(data, f)
            args = ("-C", self.config)
        self.args = tuple(args)
        self.program = [sys.executable, "-m", "queued"]
        if console:
            self.program = [sys.executable, stem + "-console.py"]
            with open(self.program[1], "w") as f:
                f.write(CONSOLE_SCRIPT)
        self.logpath = stem + ".yml.log"
        self.proc: subprocess.Popen | None = None
        self.r = redis.Redis.from_url(redis_url)

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        # No empty entry (a trailing ":"): Python reads one as the working directory, which
        # would hide whether queued itself puts it on sys.path.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (ROOT, *os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p)
        env.update(self.env)
        return env

    def start(self, *extra: str, wait=True) -> Daemon:
        self.log = open(self.logpath, "ab")
        self.proc = subprocess.Popen([*self.program, *self.args, *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.environ(), cwd=self.cwd, start_new_session=True)
        if wait:
            self.wait_up()
        return self

    def wait_up(self, timeout=60.0) -> list[int]:
        """Wait until the master is registered (its process hash) and every one of its
        worker processes has started; the workers' pids. Waiting for one worker let
        tests begin while the others were still forking: a push raced a worker that had not
        blocked yet, a forked worker still held the master's listening socket. (60 s bounds
        only a failure: a loaded 2-core box once took more than 20 s.)"""
        try:
            return wait_for(self._all_up, timeout, what="the daemon and all its workers up")
        except AssertionError as e:
            raise AssertionError(f"{e}: {self.describe()}") from None

    def describe(self) -> str:
        """What the daemon looks like now (for a failed wait): its identity, its children and
        their titles, the end of its log."""
        try:
            children = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            children = []
        kids = []
        for c in children:
            try:
                kids.append((c.pid, c.status(), title(c.pid)))
            except psutil.Error:
                pass
        return (f"master {self.pid} ({'running' if self.proc.poll() is None else 'exited'}, "
                f"title {self.title()!r}), identity {self.identity()!r}, children {kids}; "
                f"log ends:\n{self.output()[-3000:]}")

    def _all_up(self) -> list[int] | None:
        want = self.processes()
        up = self.workers_up()
        return up if want is not None and len(up) >= want else None

    def processes(self) -> int | None:
        """The worker processes the master says it runs (``processes`` in the ``info`` of its
        process hash, whose ``concurrency`` is jobs at once: processes x threads), once it
        has written one."""
        ident = self.identity()
        info = ident and self.r.hget(ident, "info")
        return json.loads(info)["processes"] if info else None

    def workers_up(self) -> list[int]:
        """The pids of the master's workers that have started: a worker's title names its
        slot (``queued 0.1 worker 1: idle``) once it has written its pid into its slot record
        and made its fetcher (worker._init_process), which is what the master counts before
        it tells systemd READY=1 (children.up). A child that is forked but not set up yet
        still has the master's title."""
        try:
            children = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []
        return [c.pid for c in children
                if pid_alive(c.pid) and WORKER_TITLE.search(title(c.pid))]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def identity(self) -> str | None:
        for member in self.r.smembers("processes"):
            if member.decode().split(":")[-2] == str(self.pid):
                return member.decode()
        return None

    def blocked_workers(self) -> list[int]:
        """The pids of this daemon's workers waiting in Redis for work (a blocking fetch, or
        the wait on their idle key while every queue is paused): their connection, found by
        its address, has CLIENT LIST's flag ``b``."""
        blocked = {c["addr"] for c in worker_connections(self.r, blocked=True)}
        return [pid for pid in self.workers_up()
                if any(f"{ip}:{port}" in blocked for ip, port in local_addresses(pid))]

    def wait_idle(self, timeout=60.0) -> list[int]:
        """Wait until every worker is up and waiting for work, and no other worker is left:
        nothing changes now until a job arrives or the master wakes one. A worker that is
        leaving (recycled, replaced) never blocks again, so it is gone by then."""
        def idle():
            up, blocked = self.workers_up(), self.blocked_workers()
            want = self.processes()
            return (want is not None and len(up) == want and sorted(blocked) == sorted(up)
                    and (up or want == 0))
        try:
            return wait_for(idle, timeout, what="every worker up and waiting for work")
        except AssertionError as e:
            raise AssertionError(f"{e}: {self.describe()}") from None

    def worker_pids(self) -> list[int]:
        try:
            return [c.pid for c in psutil.Process(self.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def signal(self, sig) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout=30.0) -> int:
        return self.proc.wait(timeout)

    def stop(self, timeout=40.0) -> int:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill_all(self) -> None:
        """SIGKILL the master and its workers at once (a host dying)."""
        pids = [self.pid] + self.worker_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)

    def title(self) -> str:
        return title(self.pid)

    def wait_log(self, text: str, timeout=10.0) -> str:
        """Wait until the daemon's output contains ``text``; return the output."""
        return wait_for(lambda: text in self.output() and self.output(), timeout,
                        what=f"{text!r} in the daemon's log")

    def output(self) -> str:
        with open(self.logpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def cleanup(self) -> None:
        if self.proc and self.proc.poll() is None:
            pids = [self.pid] + self.worker_pids()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(10)
            # A killed worker may still be blocked in BLMOVE until it is gone: the next test's
            # first push would land in its landing list, where no master will look.
            wait_for(lambda: not any(alive(pid) for pid in pids[1:]), 10,
                     what="the killed workers to be gone")
        if getattr(self, "log", None) is not None:
            self.log.close()
