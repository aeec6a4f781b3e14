"""``redis+sentinel://`` URLs: a Redis found through Redis Sentinel, written as one URL so that
everything past the configuration (the daemon, queued.Client, queuedctl) takes a Redis the same
way, as a string (connection.client_from_url makes the client).

    redis+sentinel://[[username]:password@]host[:port][,host[:port]...]/service_name[/db][?options]

- ``host:port``, comma-separated: the Sentinels to ask (the port defaults to 26379; an IPv6
  address goes in brackets, ``[::1]:26379``). Any one of them answering is enough.
- ``service_name``: the name the Sentinels monitor (``sentinel monitor <service_name> ...``).
- ``db``: the database number on the master (default 0).
- ``username``/``password``: the Redis master's own (its ``requirepass`` or ACL user), not
  the Sentinels'; percent-encode reserved characters as in any URL.
- options: ``sentinel_username=`` and ``sentinel_password=`` when the Sentinels themselves ask
  for a password; every other option is the data connection's, as in a ``redis://`` URL
  (``socket_connect_timeout=``, ...).

TLS to a Sentinel-managed Redis (``rediss+sentinel://``) is not supported yet and refused.
Nothing here talks to Redis; this module only reads and writes the text (no queued imports).
"""
from __future__ import annotations

import dataclasses
from urllib.parse import parse_qsl, quote, unquote, urlencode

SCHEME = "redis+sentinel"
DEFAULT_PORT = 26379
#: Options that are the Sentinels', not the data connection's.
SENTINEL_AUTH = ("sentinel_username", "sentinel_password")
FORMAT = ("redis+sentinel://[[username]:password@]host[:port][,host[:port]...]/service_name"
          "[/db]")


def is_sentinel_url(url: str) -> bool:
    return url.lower().startswith(SCHEME + "://")


@dataclasses.dataclass(frozen=True)
class SentinelURL:
    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    sentinel_username: str | None = None
    sentinel_password: str | None = dataclasses.field(default=None, repr=False)
    options: tuple[tuple[str, str], ...] = ()  # the data connection's (as in redis:// URLs)

    def url(self) -> str:
        auth = ""
        if self.username or self.password:
            secret = f":{quote(self.password, safe='')}" if self.password else ""
            auth = quote(self.username or "", safe="") + secret + "@"
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)
        query = list(self.options) + [(k, v) for k, v in (
            ("sentinel_username", self.sentinel_username),
            ("sentinel_password", self.sentinel_password)) if v is not None]
        return (f"{SCHEME}://{auth}{hosts}/{quote(self.service_name, safe='')}/{self.db}"
                + (f"?{urlencode(query)}" if query else ""))


def parse(url: str) -> SentinelURL:
    """The parts of a ``redis+sentinel://`` URL; ValueError says what is wrong with it."""
    scheme, sep, rest = url.partition("://")
    if scheme.lower() != SCHEME or not sep:
        raise ValueError(f"not a {SCHEME}:// URL")
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels = tuple(_host_port(item) for item in hosts.split(","))
    names = [unquote(p) for p in path.split("/") if p]
    if not names or len(names) > 2:
        raise ValueError(f"give the service name (and a db) after the hosts: {FORMAT}")
    db = 0
    if len(names) == 2:
        if not names[1].isdigit():
            raise ValueError(f"the db after the service name must be a number, not {names[1]!r}")
        db = int(names[1])
    options = dict(parse_qsl(query, keep_blank_values=True))
    own = {k: options.pop(k) for k in SENTINEL_AUTH if k in options}
    return SentinelURL(sentinels, names[0], db, username, password,
                       own.get("sentinel_username"), own.get("sentinel_password"),
                       tuple(options.items()))


def _host_port(item: str) -> tuple[str, int]:
    if item.startswith("["):  # [IPv6]:port
        host, _, port = item[1:].partition("]")
        port = port[1:] if port.startswith(":") else port
    else:
        host, _, port = item.partition(":")
    if not host:
        raise ValueError(f"a Sentinel address is empty; the URL's form is {FORMAT}")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"bad port in Sentinel address {item!r}")
    return host, int(port) if port else DEFAULT_PORT
