"""Sidekiq's ``:redis:`` mapping, folded into one redis-py URL, and URLs shown with their
password masked.

Every process (master, workers, the job code's client, queuedctl) connects through
connection.client_from_url, which passes a URL's query arguments to the connection
(ssl_ca_certs=..., they win over keyword arguments) and reads redis+sentinel:// URLs
(queued/sentinel.py). So the file's Redis, whichever way it is written (a URL, Sidekiq's
options, Sentinels), becomes one URL, and nothing past the configuration has to know about
these options.
"""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from . import sentinel
from .values import Invalid, boolean, expected, integer, path, redis_url, seconds, string

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

_VERIFY_MODES = {0: "none", 1: "required", "none": "none", "optional": "optional",
                 "required": "required", "verify_none": "none", "verify_peer": "required"}


def _verify_mode(value: Any) -> str:
    # Ruby writes OpenSSL::SSL::VERIFY_NONE (0) or VERIFY_PEER (1); redis-py's ssl_cert_reqs.
    key = value.lower() if isinstance(value, str) else value
    if isinstance(key, bool) or key not in _VERIFY_MODES:
        raise expected("none, optional, required, 0 (VERIFY_NONE) or 1 (VERIFY_PEER)", value)
    return _VERIFY_MODES[key]


#: ssl_params key -> (redis-py query argument, parser). cert and key are file paths here (Ruby
#: takes certificate objects, which a YAML file cannot hold).
_SSL_PARAMS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "ca_file": ("ssl_ca_certs", path), "ca_path": ("ssl_ca_path", path),
    "cert": ("ssl_certfile", path), "key": ("ssl_keyfile", path),
    "verify_mode": ("ssl_cert_reqs", _verify_mode),
}


def _subkeys(value: Any, known: Mapping[str, Any], what: str,
             refused: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A mapping's items keyed without the leading colon; unknown keys are Invalid."""
    if not isinstance(value, Mapping):
        raise expected(what, value)
    out: dict[str, Any] = {}
    for raw, item in value.items():
        key = raw[1:] if isinstance(raw, str) and raw.startswith(":") else raw
        if refused and key in refused:
            raise Invalid(f"not supported: {refused[key]}", str(key))
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            raise Invalid(close[0] if close else "", str(key), unknown=True)
        if key in out:
            raise Invalid(f"given twice (as '{key}' and ':{key}')", key)
        out[key] = item
    return out


def _ssl_params(value: Any) -> tuple[tuple[str, str], ...]:
    params = []
    for key, item in _subkeys(value, _SSL_PARAMS, "a mapping of ssl_params").items():
        name, parse = _SSL_PARAMS[key]
        try:
            params.append((name, parse(item)))
        except Invalid as exc:
            raise exc.within(key) from None
    return tuple(params)


def _sentinels(value: Any) -> tuple[tuple[str, int], ...]:
    """Sentinel addresses: ``host:port`` strings or redis-rb's ``{host:, port:}`` mappings."""
    if not isinstance(value, list) or not value:
        raise expected("a list of at least one Sentinel ('host:port' or {host:, port:})", value)
    out = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping):
            given = _subkeys(item, {"host": 0, "port": 0}, "a Sentinel's host and port")
            if not isinstance(given.get("host"), str) or not given["host"]:
                raise Invalid("a Sentinel needs a host", f"{i}.host")
            item = f"{given['host']}:{given.get('port', sentinel.DEFAULT_PORT)}"
        if not isinstance(item, str):
            raise expected("'host:port' or {host:, port:}", item).within(str(i))
        try:
            out.append(sentinel.parse(f"{sentinel.SCHEME}://{item}/x").sentinels[0])
        except ValueError as e:
            raise Invalid(str(e), str(i)) from None
    return tuple(out)


def _role(value: Any) -> str:
    # redis-rb's role: :master (a replica would refuse queued's writes)
    if value not in ("master", ":master"):
        raise expected("master (queued writes on every call: a replica cannot serve it)", value)
    return "master"


_SECRET = string("a string (quote a number)")
#: Sidekiq's redis options queued takes: name -> parser.
_REDIS_KEYS: dict[str, Callable[[Any], Any]] = {
    "url": redis_url, "username": _SECRET, "password": _SECRET, "db": integer(0),
    "ssl": boolean, "ssl_params": _ssl_params,
    "connect_timeout": seconds(0, above=True),
    # Redis Sentinel (see queued/sentinel.py): the master is found by asking them
    "sentinels": _sentinels, "master_name": string("the name the Sentinels monitor"),
    "role": _role, "sentinel_username": _SECRET, "sentinel_password": _SECRET,
}
_OWN_TIMEOUTS = "queued sets its own read timeouts (a blocking fetch waits up to fetch_timeout)"
_NO_POOL = "each queued process holds its own connections; there is no pool to size"
#: Sidekiq's redis options that make no sense here, with the reason the error gives.
_REDIS_REFUSED = {
    "network_timeout": _OWN_TIMEOUTS, "read_timeout": _OWN_TIMEOUTS,
    "write_timeout": _OWN_TIMEOUTS, "size": _NO_POOL, "pool_timeout": _NO_POOL,
    "host": "give redis.url", "port": "give redis.url", "path": "give redis.url (unix://...)",
    "driver": "queued uses redis-py",
}


@dataclasses.dataclass(frozen=True)
class RedisOptions:
    """Sidekiq's ``:redis:`` mapping, checked. ``full_url()`` is the one URL it describes: the
    options replace the URL's own parts, as in redis-rb."""

    url: str | None = None
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    db: int | None = None
    ssl: bool | None = None
    ssl_params: tuple[tuple[str, str], ...] = ()  # (redis-py query argument, value)
    connect_timeout: float | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    master_name: str | None = None
    role: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = dataclasses.field(default=None, repr=False)

    def full_url(self) -> str:
        if self.sentinels or sentinel.is_sentinel_url(self.url or ""):
            return self._sentinel_url()
        parts = urlsplit(self.url or DEFAULT_REDIS_URL)
        scheme = "rediss" if self.ssl else parts.scheme
        user = self.username if self.username is not None else parts.username
        password = self.password if self.password is not None else parts.password
        if self.username is None and user:
            user = unquote(user)
        if self.password is None and password:
            password = unquote(password)
        auth = ""
        if user or password:
            secret = f":{quote(password, safe='')}" if password else ""
            auth = quote(user or "", safe="") + secret + "@"
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        path = parts.path
        if self.db is not None and scheme == "unix":
            query["db"] = str(self.db)
        elif self.db is not None:
            path = f"/{self.db}"
            query.pop("db", None)  # a db= argument would win over the path
        query.update(self.ssl_params)
        if self.connect_timeout is not None:
            query["socket_connect_timeout"] = f"{self.connect_timeout:g}"
        host = parts.netloc.rpartition("@")[2]
        return _unsplit(scheme, auth + host, path, urlencode(query))


    def _sentinel_url(self) -> str:
        """A ``redis+sentinel://`` URL: from ``sentinels`` (the master named by master_name,
        or as redis-rb has it, by the host of ``url``: redis://mymaster/0), or from a
        redis+sentinel:// ``url``; the other options replace its parts."""
        if self.sentinels:
            parts = urlsplit(self.url or "redis://")
            host = parts.netloc.rpartition("@")[2].partition(":")[0]
            base = sentinel.SentinelURL(
                self.sentinels, self.master_name or unquote(host),
                int(parts.path.strip("/") or 0),
                unquote(parts.username) if parts.username else None,
                unquote(parts.password) if parts.password else None)
        else:
            base = sentinel.parse(self.url or "")
        changes = {k: getattr(self, k) for k in (
            "username", "password", "db", "sentinel_username", "sentinel_password")
            if getattr(self, k) is not None}
        if self.connect_timeout is not None:
            changes["options"] = (*[o for o in base.options if o[0] != "socket_connect_timeout"],
                                  ("socket_connect_timeout", f"{self.connect_timeout:g}"))
        return dataclasses.replace(base, **changes).url()


def _unsplit(scheme: str, netloc: str, path: str, query: str) -> str:
    # urlunsplit writes unix:///run/r.sock as unix:/run/r.sock (no netloc, no "//").
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def redis_options(value: Any) -> RedisOptions | None:
    if value is None:
        return None
    given = _subkeys(value, _REDIS_KEYS, "a mapping of redis options (url, password, ...)",
                     _REDIS_REFUSED)
    options: dict[str, Any] = {}
    for key, item in given.items():
        try:
            options[key] = _REDIS_KEYS[key](item)
        except Invalid as exc:
            raise exc.within(key) from None
    opts = RedisOptions(**options)
    _check_sentinel(opts)
    scheme = urlsplit(opts.url or DEFAULT_REDIS_URL).scheme
    if opts.ssl and scheme == "unix":
        raise Invalid("true, but redis.url is a unix:// socket (no TLS there)", "ssl")
    if opts.ssl is False and scheme == "rediss":
        raise Invalid("false, but redis.url is rediss:// (TLS)", "ssl")
    if opts.ssl_params and not (opts.ssl or scheme == "rediss"):
        raise Invalid("needs TLS: a rediss:// redis.url, or ssl: true", "ssl_params")
    return opts


def _check_sentinel(opts: RedisOptions) -> None:
    via_url = sentinel.is_sentinel_url(opts.url or "")
    if not (opts.sentinels or via_url):
        for key in ("master_name", "role", "sentinel_username", "sentinel_password"):
            if getattr(opts, key) is not None:
                raise Invalid("is for Redis Sentinel: give sentinels (a list of host:port) too",
                              key)
        return
    if opts.sentinels and via_url:
        raise Invalid("given twice: in sentinels and in redis.url (redis+sentinel://)",
                      "sentinels")
    scheme = urlsplit(opts.url or "redis://").scheme
    if opts.ssl or scheme == "rediss" or opts.ssl_params:
        raise Invalid("TLS to a Sentinel-managed Redis is not supported yet", "ssl")
    if opts.sentinels and (scheme != "redis" or not (opts.master_name or urlsplit(
            opts.url or "redis://").netloc.rpartition("@")[2])):
        raise Invalid("the name the Sentinels monitor is missing: give master_name (or, as "
                      "redis-rb has it, url: redis://<master_name>)", "master_name")


def mask_url(url: str) -> str:
    """The URL with its password (in the user part or a password= argument) shown as ****."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password:
        netloc = f"{parts.username or ''}:****@{netloc.rpartition('@')[2]}"
    query = "&".join(f"{name}=****" if name in ("password", "sentinel_password") else item
                     for item in parts.query.split("&")
                     for name in [item.partition("=")[0]]) if parts.query else ""
    return _unsplit(parts.scheme, netloc, parts.path, query)
