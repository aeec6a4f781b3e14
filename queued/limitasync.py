"""The async side of queued.Limiter (limiter.py): its scripts on a redis.asyncio client, and
which client: queued's ``get_async_redis()`` (one per event loop, issue 17) for the default
client where it exists, else one made here per (client, loop) from the sync client's address.
"""
from __future__ import annotations

import weakref
from typing import Any

from . import client as _client
from .connection import Script


async def run_async(script: Script, r: Any, keys: list, args: list) -> Any:
    """A script by SHA on a redis.asyncio client (EVAL when Redis has not seen it)."""
    from redis.exceptions import NoScriptError
    try:
        return await r.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return await r.eval(script.source, len(keys), *keys, *args)


def async_redis(c: Any) -> Any:
    """The running loop's redis.asyncio client of the same server as queued.Client ``c``."""
    import asyncio
    getter = getattr(_client, "get_async_redis", None)
    if getter is not None and c is _client.default_client():
        return getter()
    loop = asyncio.get_running_loop()
    per_loop = _clients.setdefault(loop, {})
    found = per_loop.get(id(c))
    if found is None:
        import redis.asyncio as aioredis
        kw = dict(getattr(c.redis.connection_pool, "connection_kwargs", {}))
        kw["unix_socket_path"] = kw.get("path")
        found = per_loop[id(c)] = aioredis.Redis(**{
            k: kw[k] for k in ("host", "port", "db", "username", "password",
                               "unix_socket_path") if kw.get(k) is not None})
    return found


_clients: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
