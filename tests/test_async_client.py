"""queued.get_async_redis(): the job code's redis.asyncio client, one per event loop, on the
server get_redis() talks to."""
import asyncio

import queued


def test_an_async_client_per_loop_on_the_default_clients_server(default_client, r):
    r.set("t:where", "here")

    async def use():
        a = queued.get_async_redis()
        assert a is queued.get_async_redis()  # one per loop
        got = await a.get("t:where")
        await a.aclose()
        return a, got

    first, got = asyncio.run(use())
    assert got == b"here"
    second, _ = asyncio.run(use())
    assert second is not first  # another loop, another client (and pool)


def test_many_commands_at_once_share_a_bounded_pool(default_client, r):
    from queued.client import ASYNC_MAX_CONNECTIONS

    async def many():
        a = queued.get_async_redis()
        await asyncio.gather(*(a.incr("t:n") for _ in range(500)))
        opened = len(await a.client_list())  # (while its connections are still open)
        await a.aclose()
        return opened

    before = len(r.client_list())
    opened = asyncio.run(many())
    assert int(r.get("t:n")) == 500
    assert before < opened <= before + ASYNC_MAX_CONNECTIONS
