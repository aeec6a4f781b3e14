"""A real master under a stand-in for systemd: the test binds the datagram socket systemd would
pass in $NOTIFY_SOCKET (with WatchdogSec=0.4, as $WATCHDOG_USEC) and reads what the daemon
says: READY once its workers are up, STATUS when the busy count changes, WATCHDOG pings at
half the interval while its loop turns and none while it is wedged, STOPPING on TERM."""
from __future__ import annotations

import json
import signal
import socket
import threading
import time

import pytest

import jobs
from harness import wait_for

WEDGE = "t:notify:wedge"
SEEN = "t:notify:env"
#: WatchdogSec=0.4: pings every 0.2 s.
WATCHDOG_USEC = 400_000
INTERVAL = WATCHDOG_USEC / 2e6


class Systemd:
    """The receiving end of $NOTIFY_SOCKET: every datagram with the time it arrived."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.messages: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.done = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.messages.append((time.monotonic(), data.decode()))

    def all(self) -> list[tuple[float, str]]:
        with self.lock:
            return list(self.messages)

    def texts(self, since: float = 0.0) -> list[str]:
        return [m for t, m in self.all() if t >= since]

    def pings(self, since: float = 0.0, until: float = float("inf")) -> list[float]:
        return [t for t, m in self.all() if m == "WATCHDOG=1" and since <= t < until]

    def statuses(self, since: float = 0.0) -> list[str]:
        return [line[7:] for m in self.texts(since) for line in m.splitlines()
                if line.startswith("STATUS=")]

    def close(self):
        self.done = True
        self.sock.close()
        self.thread.join(5)


@pytest.fixture
def systemd(tmp_path):
    s = Systemd(str(tmp_path / "notify.sock"))
    yield s
    s.close()


def start(daemon, tmp_path, **settings):
    return daemon(require=("notifyjobs.py",), env={
        "NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": str(WATCHDOG_USEC)},
        **settings)


def test_ready_once_the_workers_are_up_then_status_changes_and_stopping(
        daemon, producer, r, systemd, tmp_path):
    # Given a daemon started the way systemd starts a Type=notify service
    d = start(daemon, tmp_path, concurrency=2)
    # Then it says READY=1, naming itself as the main process, once both workers are up
    ready = wait_for(lambda: [m for m in systemd.texts() if m.startswith("READY=1")], 10,
                     what="READY=1")
    assert ready == [f"READY=1\nMAINPID={d.pid}\nSTATUS=0 of 2 busy"]
    assert len(d.worker_pids()) == 2
    # When two jobs run, STATUS follows the busy count, and only when it changes
    t0 = time.monotonic()
    jids = [jobs.Gate.perform_async("notify") for _ in range(2)]
    wait_for(lambda: "2 of 2 busy" in systemd.statuses(t0), 10, what="STATUS busy")
    jobs.open_gate(r, "notify")
    wait_for(lambda: len(r.hgetall(jobs.DONE)) == 2, 10, what="jobs done")
    wait_for(lambda: systemd.statuses(t0)[-1:] == ["0 of 2 busy"], 10, what="STATUS idle")
    statuses = systemd.statuses(t0)
    assert all(a != b for a, b in zip(statuses, statuses[1:])), statuses  # no repeats
    assert set(r.hgetall(jobs.DONE)) == {j.encode() for j in jids}
    # And nothing but pings while idle: no STATUS once a second, no STATUS per loop turn
    idle_since = time.monotonic()
    wait_for(lambda: len(systemd.pings(idle_since)) >= 5, 10, what="pings while idle")
    assert systemd.statuses(idle_since) == []
    # When it gets TERM it says STOPPING=1 at once, and exits cleanly
    d.signal(signal.SIGTERM)
    wait_for(lambda: any(m.startswith("STOPPING=1") for m in systemd.texts()), 10,
             what="STOPPING=1")
    assert d.wait(20) == 0


def test_only_the_master_talks_to_systemd(daemon, producer, r, systemd, tmp_path):
    # Given a daemon under systemd
    start(daemon, tmp_path, concurrency=1)
    wait_for(lambda: any(m.startswith("READY=1") for m in systemd.texts()), 10, what="READY")
    # When a job looks at its worker's environment
    r.delete(SEEN)
    from queued.client import default_client
    default_client().push({"class": "ShowEnv", "args": []})
    seen = wait_for(lambda: r.lrange(SEEN, 0, -1), 10, what="the job's report")
    # Then systemd's variables are gone there (and from anything a job starts)
    assert json.loads(seen[0]) == {"NOTIFY_SOCKET": None, "WATCHDOG_USEC": None,
                                   "WATCHDOG_PID": None}


def test_watchdog_pings_at_half_the_interval_and_stop_while_the_loop_is_wedged(
        daemon, producer, r, systemd, tmp_path):
    # Given a daemon under systemd with WatchdogSec=0.4 (a ping due every 0.2 s), running a
    # stream of jobs so its loop turns often
    d = start(daemon, tmp_path, concurrency=2)
    wait_for(lambda: any(m.startswith("READY=1") for m in systemd.texts()), 10, what="READY")
    jobs.Record.perform_bulk([[i] for i in range(2000)])
    # Then over a window of 3 s it pinged about 15 times: never more often than every 0.2 s
    # (at most 16: the loop turned thousands of times), and not much less often (a loaded
    # machine may delay a turn, so the lower bound is generous)
    t0 = time.monotonic()
    wait_for(lambda: time.monotonic() - t0 > 3.2, 10, interval=0.1, what="3 s of pings")
    window = systemd.pings(t0, t0 + 3.0)
    assert 5 <= len(window) <= 3.0 / INTERVAL + 1, window
    # When a heartbeat hook hangs (the master's loop is stuck inside it)
    r.set(WEDGE, 1)
    wait_for(lambda: r.llen(WEDGE + ":began"), 10, what="the hook to wedge the loop")
    wedged_at = time.monotonic()
    # Then the pings stop: none for 5 intervals (systemd would kill and restart it)
    wait_for(lambda: time.monotonic() - wedged_at > 5 * INTERVAL + 0.1, 5, interval=0.05,
             what="five intervals")
    late = systemd.pings(wedged_at + INTERVAL + 0.05)  # (one may have been on its way)
    assert late == [], late
    # And they come back once the loop turns again
    r.delete(WEDGE)
    wait_for(lambda: systemd.pings(time.monotonic() - INTERVAL * 3), 10, what="pings again")
    assert d.stop() == 0
