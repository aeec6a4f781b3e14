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

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

#: Seconds a command may take before the socket read gives up. Blocking fetches add their
#: own block time on top (see fetch.py).
SOCKET_TIMEOUT = 10.0


def make_redis(url: str, *, socket_timeout: float | None = SOCKET_TIMEOUT, name: str | None = None,
               **kwargs: Any) -> redis.Redis:
    """A bytes-in, bytes-out client (payloads are compared byte for byte).

    redis-py's own silent retries are turned off: re-sending a script that popped a job after
    a lost reply would reserve it twice. Callers retry with their own backoff and logging.
    """
    return redis.Redis.from_url(
        url, socket_timeout=socket_timeout, socket_connect_timeout=5.0,
        health_check_interval=0, client_name=name, retry=Retry(NoBackoff(), 0), **kwargs)


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
