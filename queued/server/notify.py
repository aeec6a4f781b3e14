"""systemd's notify protocol (``Type=notify``) without libsystemd: READY, STATUS, STOPPING,
MAINPID and the watchdog's pings.

systemd passes the address of a datagram socket in ``$NOTIFY_SOCKET`` (a path, or an abstract
socket written with a leading ``@``); a message is ``KEY=VALUE`` lines in one datagram. With
``WatchdogSec=`` it also sets ``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``, the process meant):
a service that sends no ``WATCHDOG=1`` for that long is killed and restarted. Sidekiq does the
same in ~60 lines of Ruby (sd_notify.rb); so does this, for the same reason: no dependency.

The master's loop pings, never a thread: a thread would go on pinging while the loop is
wedged (a hook that hangs, a deadlock), and noticing that is the watchdog's whole point. Pings
go out every ``WATCHDOG_USEC / 2`` (what sd_watchdog_enabled(3) advises), STATUS only when its
text changes. The variables are taken out of the environment as they are read (sd_notify's
``unset_environment``), so workers, the embedded redis-server and whatever a job starts never
talk to systemd in the master's name.

Outside systemd (no ``$NOTIFY_SOCKET``) every method does nothing.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from typing import MutableMapping

log = logging.getLogger("queued.master")

ENV_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    def __init__(self, address: str | None = None, watchdog_usec: int | None = None):
        self.address = _address(address) if address else None
        #: Seconds between two pings (None: no watchdog for this process).
        self.interval = watchdog_usec / 2e6 if watchdog_usec and self.address else None
        self.next_ping = 0.0   # monotonic: the first ping goes out at the first tick
        self.status_sent: str | None = None
        self.ready_sent = False
        self.failed = False    # a failed send is logged once
        self.sock: socket.socket | None = None

    @classmethod
    def from_environ(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """The notifier systemd's variables describe, which are removed from ``environ``."""
        environ = os.environ if environ is None else environ
        address, usec, pid = (environ.pop(name, None) for name in ENV_VARS)
        watchdog = None
        if usec and (not pid or pid.strip() == str(os.getpid())):
            try:
                watchdog = int(usec) if int(usec) > 0 else None
            except ValueError:
                log.warning("WATCHDOG_USEC=%r is not a number of microseconds; no watchdog "
                            "pings", usec)
        return cls(address, watchdog)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    # --- messages -------------------------------------------------------------------------
    def ready(self, status: str) -> None:
        """The workers are up (once). MAINPID says which process systemd should watch: this
        one, which matters when queued was started through a wrapper that did not exec."""
        if self.ready_sent:
            return
        self.ready_sent = True
        self.status_sent = status
        self.send(f"READY=1\nMAINPID={os.getpid()}\nSTATUS={status}")

    def status(self, text: str) -> None:
        if text != self.status_sent:
            self.status_sent = text
            self.send(f"STATUS={text}")

    def stopping(self, status: str) -> None:
        self.status_sent = status
        self.send(f"STOPPING=1\nSTATUS={status}")

    def due_in(self, now: float) -> float | None:
        """Seconds until the next ping is due (None without a watchdog)."""
        return None if self.interval is None else max(0.0, self.next_ping - now)

    def tick(self, now: float | None = None) -> None:
        """Ping the watchdog if it is time: called by the master's loop on every turn."""
        if self.interval is None:
            return
        now = time.monotonic() if now is None else now
        if now >= self.next_ping:
            self.next_ping = now + self.interval
            self.send("WATCHDOG=1")

    def send(self, message: str) -> None:
        if self.address is None:
            return
        try:
            if self.sock is None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self.sock.setblocking(False)  # never wait on systemd
            self.sock.sendto(message.encode("utf-8", "replace"), self.address)
        except OSError as e:
            if not self.failed:
                self.failed = True
                log.warning("cannot notify systemd at %s (%s); carrying on without it",
                            self.address.replace("\0", "@"), e)

    def close(self) -> None:
        """In a forked worker: the socket is the master's."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.address = self.interval = None


def _address(text: str) -> str:
    # "@name" is the abstract socket "\0name" (sd_notify(3)).
    return "\0" + text[1:] if text.startswith("@") else text
