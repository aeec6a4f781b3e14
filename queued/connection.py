"""Redis clients, and Lua scripts run by SHA.

Every process makes its own clients after fork (a socket shared between processes would
interleave replies). Scripts are called with EVALSHA and fall back to EVAL on NOSCRIPT, which
happens after a Redis restart or SCRIPT FLUSH. Each wing keeps its own scripts beside its code
(queued/server/lua/ for the daemon's) and makes its ``Script`` objects there.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Sequence
from urllib.parse import urlencode

import redis
import redis.connection
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import sentinel

#: Seconds a command may take before the socket read gives up. Blocking fetches add their
#: own block time on top (see server/sentahead.py).
SOCKET_TIMEOUT = 10.0
#: Seconds to wait for one Sentinel's answer (where the master is) before asking the next.
SENTINEL_TIMEOUT = 1.0


def make_redis(url: str, *, socket_timeout: float | None = SOCKET_TIMEOUT, name: str | None = None,
               **kwargs: Any) -> redis.Redis:
    """A bytes-in, bytes-out client (payloads are compared byte for byte).

    redis-py's own silent retries are turned off: re-sending a script that popped a job after
    a lost reply would reserve it twice. Callers retry with their own backoff and logging.
    """
    return client_from_url(
        url, socket_timeout=socket_timeout, socket_connect_timeout=5.0,
        health_check_interval=0, client_name=name, retry=Retry(NoBackoff(), 0), **kwargs)


def client_from_url(url: str, **kwargs: Any) -> redis.Redis:
    """The one place a Redis URL becomes a client (the daemon, queued.Client, queuedctl).
    ``redis://``, ``rediss://`` and ``unix://`` are redis-py's own; ``redis+sentinel://``
    (queued/sentinel.py) is a client whose connections ask the Sentinels where the master is
    whenever they connect, so after a failover they reconnect to the new one by themselves.
    A URL's query options win over ``kwargs``, as redis-py's from_url has it."""
    if not sentinel.is_sentinel_url(url):
        return redis.Redis.from_url(url, **kwargs)
    s = sentinel.parse(url)
    # The options are read as redis-py reads a redis:// URL's (their types, their names).
    options = redis.connection.parse_url("redis://sentinel-managed?" + urlencode(s.options))
    for key in ("host", "port", "db", "username", "password"):
        options.pop(key, None)
    auth = {k: v for k, v in (("username", s.username), ("password", s.password)) if v}
    # One try per Sentinel, briefly: one that is down must not hold up asking the next.
    asked = {"socket_timeout": SENTINEL_TIMEOUT, "socket_connect_timeout": SENTINEL_TIMEOUT,
             "retry": Retry(NoBackoff(), 0),
             **{k: v for k, v in (("username", s.sentinel_username),
                                  ("password", s.sentinel_password)) if v}}
    # A client made without a retry policy (queued.Client, the job code's get_redis())
    # reconnects once, at once, on a broken connection: after a failover that is the reconnect
    # that finds the new master, where a plain redis:// client would raise (as Sidekiq's
    # clients reconnect once). Timeouts are not retried: the command may have been applied.
    # The daemon's and queuedctl's clients give retries=0 and retry themselves.
    kwargs.setdefault("retry", Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)))
    manager = redis.sentinel.Sentinel(list(s.sentinels), sentinel_kwargs=asked)
    return manager.master_for(s.service_name, redis_class=redis.Redis,
                              connection_class=_SentinelConnection,
                              **{**kwargs, **options, **auth, "db": s.db})


class _SentinelConnection(redis.sentinel.SentinelManagedConnection):
    """redis-py's Sentinel-managed connection, asking the Sentinels where the master is on
    every connect. redis-py (5 and later) asks only in connect(), which its pool calls at each
    checkout; a connection used outside the pool (a worker's fetch connection, the job code's
    single connection, queued.Client's own) reconnects through connect_check_health instead,
    to the last address it had: after a failover, the old master, now a replica."""

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        if not self._sock and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        return super().connect_check_health(*args, **kwargs)


# --- packing commands ---------------------------------------------------------------------------
#
# redis-py's packer checks every argument's type in two generator expressions and encodes it
# through its Encoder: for a worker's reserve call (a member per ack, a queue order per job) that
# was ~8,000 instructions per job (issue 18). hiredis packs bytes, int and str itself, exactly
# as the Encoder writes them (str as UTF-8, strict; an int in decimal), so commands made only of
# those go to it whole. Anything else is redis-py's: a float (redis-py writes its repr, which
# hiredis 3.5 writes too but no version promises), a memoryview, a command name that is not all
# ASCII letters (redis-py splits it at whitespace, sends nothing for an empty one), and every
# command of a connection whose encoder is not UTF-8 strict.

try:
    from hiredis import pack_command as hiredis_pack
except ImportError:  # (hiredis older than 2.1, or absent)
    hiredis_pack = None

#: Argument types hiredis packs as redis-py's UTF-8, strict Encoder does.
PACKED_AS_IS = frozenset((bytes, str, int))


def hiredis_packs(command: Sequence, passed: frozenset = PACKED_AS_IS) -> bool:
    """Whether hiredis writes ``command`` as redis-py would: a name redis-py would neither
    split (it splits one at any whitespace and sends nothing for an empty one) nor encode
    otherwise than UTF-8 (ASCII letters, so JSON.SET is redis-py's), and arguments of the
    ``passed`` types only (``(name,)`` asks about the name alone)."""
    name = command[0]
    if name.__class__ is not str or not (name.isalpha() and name.isascii()):
        return False
    for arg in command:
        if arg.__class__ not in passed:
            return False
    return True


def pack_commands(conn: Any, commands: Sequence[tuple]) -> list:
    """``conn.pack_commands(commands)``: the same bytes, for ``conn.send_packed_command``."""
    encoder = conn.encoder
    if hiredis_pack is None or encoder.encoding != "utf-8" or encoder.encoding_errors != "strict":
        return conn.pack_commands(commands)
    out = []
    for command in commands:
        if not hiredis_packs(command):
            return conn.pack_commands(commands)
        out.append(hiredis_pack(command))
    return [b"".join(out)] if len(out) > 1 else out


class Script:
    """One Lua file (``directory``/``name``.lua), run by SHA. ``prelude``: a library's source
    put in front of it (Lua scripts cannot include one another; queued/lua/task.lua is one)."""

    def __init__(self, directory: str, name: str, prelude: bytes = b""):
        with open(os.path.join(directory, name + ".lua"), "rb") as f:
            self.source = prelude + f.read()
        self.name = name
        self.sha = hashlib.sha1(self.source).hexdigest()

    def __call__(self, client: redis.Redis, keys: Sequence, args: Sequence = ()) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)

    def command(self, keys: Sequence, args: Sequence = ()) -> tuple:
        """The raw EVALSHA command, for write-behind use on a bare connection."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def eval_command(self, keys: Sequence, args: Sequence = ()) -> tuple:
        return ("EVAL", self.source, len(keys), *keys, *args)
