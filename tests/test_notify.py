"""queued.server.notify: systemd's notify protocol against a real datagram socket."""
from __future__ import annotations

import os
import socket

import pytest

from queued.server.notify import Notifier


@pytest.fixture
def listener(tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    sock.bind(path)
    sock.settimeout(2)
    yield path, sock
    sock.close()


def received(sock) -> list[str]:
    """Every datagram waiting now."""
    out = []
    sock.setblocking(False)
    try:
        while True:
            out.append(sock.recv(4096).decode())
    except BlockingIOError:
        return out
    finally:
        sock.settimeout(2)


def test_the_variables_are_read_and_taken_out_of_the_environment(listener):
    path, sock = listener
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid()),
           "OTHER": "kept"}
    n = Notifier.from_environ(env)
    # so no child (a worker, the embedded redis-server, a job's subprocess) speaks for us
    assert env == {"OTHER": "kept"}
    assert n.enabled and n.interval == 1.5
    n.ready("0 of 2 busy")
    assert sock.recv(4096).decode() == f"READY=1\nMAINPID={os.getpid()}\nSTATUS=0 of 2 busy"


def test_an_abstract_socket_is_written_with_a_leading_at(tmp_path):
    name = f"queued-test-notify-{os.getpid()}-{id(tmp_path)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    try:
        Notifier.from_environ({"NOTIFY_SOCKET": "@" + name}).send("STATUS=hello")
        assert sock.recv(4096) == b"STATUS=hello"
    finally:
        sock.close()


def test_watchdog_pid_of_another_process_means_no_pings_from_this_one(listener):
    path, sock = listener
    n = Notifier.from_environ({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000",
                               "WATCHDOG_PID": str(os.getpid() + 1)})
    assert n.interval is None and n.due_in(0.0) is None
    n.tick(100.0)
    assert received(sock) == []


def test_pings_go_out_at_half_the_watchdog_interval_never_more_often(listener):
    path, sock = listener
    n = Notifier(path, watchdog_usec=1_000_000)  # WatchdogSec=1: a ping every 0.5 s
    # Given the loop turning every 10 ms for 2.5 s (clock injected)
    for step in range(251):
        n.tick(1000.0 + step * 0.01)
    # Then it pinged at 0, 0.5, ... 2.5 s: 6 times, not once a turn
    assert received(sock) == ["WATCHDOG=1"] * 6
    assert n.due_in(1002.6) == pytest.approx(0.4)


def test_status_goes_out_only_when_it_changes(listener):
    path, sock = listener
    n = Notifier(path)
    for text in ["0 of 2 busy", "0 of 2 busy", "1 of 2 busy", "1 of 2 busy", "0 of 2 busy"]:
        n.status(text)
    n.stopping("0 of 2 busy; stopping")
    assert received(sock) == ["STATUS=0 of 2 busy", "STATUS=1 of 2 busy", "STATUS=0 of 2 busy",
                              "STOPPING=1\nSTATUS=0 of 2 busy; stopping"]


def test_outside_systemd_nothing_is_sent_and_nothing_fails():
    n = Notifier.from_environ({})
    assert not n.enabled and n.due_in(0.0) is None
    n.ready("x")
    n.status("y")
    n.stopping("z")
    n.tick()


def test_a_socket_nobody_listens_on_is_logged_once_and_never_raises(tmp_path, caplog):
    n = Notifier(str(tmp_path / "gone.sock"), watchdog_usec=2)
    for i in range(5):
        n.tick(float(i))
        n.status(str(i))
    assert [r.message for r in caplog.records].count(
        next(r.message for r in caplog.records if "cannot notify systemd" in r.message)) == 1
