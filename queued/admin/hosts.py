"""Which ``Host`` the dashboard answers (issue 16: DNS rebinding). Pure: no web framework here,
so ``queuedctl web`` checks ``--allow-host`` before it imports the dashboard; the check itself
is web/security.py's HostCheck."""
from __future__ import annotations

from typing import Iterable


#: The names a loopback address goes by (the mountable app's default, on any port).
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def parse_host(value: str) -> tuple[str, int | None] | None:
    """A ``Host`` value (``name``, ``name:port``, ``[v6]`` or ``[v6]:port``) as (name, port
    or None), the name lower-cased without a final dot; None when it is not one."""
    value = value.strip().lower()
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or not name or any(c not in "0123456789abcdef:." for c in name):
            return None
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] if rest else None
    else:
        name, sep, port = value.partition(":")
        name = name[:-1] if name.endswith(".") else name
        if not name or any(c in name for c in "/@[]\\ \t"):
            return None
        port = port if sep else None
    if port is not None and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return None
    return name, None if port is None else int(port)


class AllowedHosts:
    """What the Host check lets through: ``NAME`` (on any port), ``NAME:PORT``,
    ``[V6]:PORT``, or ``*`` (anything: for a site in front that checks Host itself, as
    Django's ALLOWED_HOSTS does)."""

    def __init__(self, names: Iterable[str]):
        names = list(names)
        self.any = "*" in names
        self.ports: dict[str, set[int] | None] = {}  # name -> its ports, None: any
        for entry in names:
            if entry == "*":
                continue
            found = parse_host(entry)
            if found is None:
                raise ValueError(f"not a host name: {entry!r}")
            name, port = found
            if port is None:
                self.ports[name] = None
            elif self.ports.get(name, set()) is not None:
                self.ports.setdefault(name, set()).add(port)

    def allows(self, header: str, scheme: str = "http") -> bool:
        if self.any:
            return True
        found = parse_host(header)
        if found is None or found[0] not in self.ports:
            return False
        ports = self.ports[found[0]]
        default = 443 if scheme in ("https", "wss") else 80
        return ports is None or (default if found[1] is None else found[1]) in ports
