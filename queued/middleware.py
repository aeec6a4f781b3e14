"""Middleware chains: an onion around every push (client) and every job run (server).

An entry is a class plus constructor arguments; a fresh instance is made for each job, so no
state leaks from one job to the next. A middleware is called as
``mw(job, msg, queue, call_next)`` and must return ``call_next()`` to go on (or return
without calling it to stop the chain: a client middleware that does so cancels the push).
``job`` is the job instance on the server side and the job class name on the client side.

Around an ``async def perform`` job (``invoke_async``), ``call_next()`` returns an awaitable:
a middleware whose ``__call__`` is ``async def`` awaits it (and so wraps the job's whole run:
its time, its exceptions); a plain one returns it, as it returns ``call_next()`` for any job,
and then sees the job start but not end. The same middleware serves both kinds of job.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable


class Chain:
    def __init__(self) -> None:
        #: (class, args, kwargs), outermost first; changed in place only, so a caller may
        #: test it for emptiness without a call (the worker's path of a job: runner.py)
        self.entries: list[tuple[type, tuple, dict]] = []

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return (cls for cls, _, _ in self.entries)

    def _index(self, cls: type) -> int:
        for i, (c, _, _) in enumerate(self.entries):
            if c is cls:
                return i
        raise ValueError(f"{cls.__name__} is not in the chain")

    def _drop(self, cls: type) -> None:
        self.entries[:] = [e for e in self.entries if e[0] is not cls]

    def add(self, cls: type, *args: Any, **kwargs: Any) -> None:
        """Append (or move to the end, with new arguments, if already present)."""
        self._drop(cls)
        self.entries.append((cls, args, kwargs))

    def prepend(self, cls: type, *args: Any, **kwargs: Any) -> None:
        self._drop(cls)
        self.entries.insert(0, (cls, args, kwargs))

    def insert_before(self, old: type, cls: type, *args: Any, **kwargs: Any) -> None:
        self._insert(old, 0, cls, args, kwargs)

    def insert_after(self, old: type, cls: type, *args: Any, **kwargs: Any) -> None:
        self._insert(old, 1, cls, args, kwargs)

    def _insert(self, old: type, after: int, cls: type, args: tuple, kwargs: dict) -> None:
        self._index(old)  # a missing anchor raises before anything changes
        self._drop(cls)
        self.entries.insert(self._index(old) + after, (cls, args, kwargs))

    def remove(self, cls: type) -> None:
        self._drop(cls)

    def clear(self) -> None:
        self.entries.clear()

    def snapshot(self) -> list:
        """The entries, to be put back with ``restore`` (a HUP's reload of the job code)."""
        return list(self.entries)

    def restore(self, entries: list) -> None:
        self.entries[:] = entries

    def invoke(self, job: Any, msg: dict, queue: str, final: Callable[[], Any]) -> Any:
        """Run ``final`` inside every middleware, first-added outermost."""
        if not self.entries:
            return final()
        instances = [cls(*a, **kw) for cls, a, kw in self.entries]

        def step(i: int) -> Any:
            if i == len(instances):
                return final()
            return instances[i](job, msg, queue, lambda: step(i + 1))

        return step(0)

    async def invoke_async(self, job: Any, msg: dict, queue: str,
                           final: Callable[[], Any]) -> Any:
        """``invoke`` for a job whose ``final()`` returns an awaitable (see the header)."""
        if not self.entries:
            return await final()
        instances = [cls(*a, **kw) for cls, a, kw in self.entries]

        async def step(i: int) -> Any:
            if i == len(instances):
                return await final()
            result = instances[i](job, msg, queue, lambda: step(i + 1))
            return await result if inspect.isawaitable(result) else result

        return await step(0)

    def reaches_end(self, job: Any, msg: dict, queue: str) -> bool:
        """Run the chain around nothing: True if every middleware called the next link (a
        push goes ahead), False if one stopped it (a client middleware cancelling a push).
        ``msg`` may be changed on the way; exceptions go to the caller."""
        reached = False

        def final() -> dict:
            nonlocal reached
            reached = True
            return msg

        self.invoke(job, msg, queue, final)
        return reached


#: Runs around every push made by queued's client (client.py).
client_middleware = Chain()
#: Runs around every job a worker performs (worker.py).
server_middleware = Chain()
