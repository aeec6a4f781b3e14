"""queued.testing: test job code without Redis or a daemon (Sidekiq::Testing's modes).

    import queued.testing

    queued.testing.fake()              # pushes go to in-memory lists, one per job class
    HardWorker.perform_async("bob", 5)
    assert HardWorker.jobs[0]["args"] == ["bob", 5]
    HardWorker.drain()                 # runs them here, in order; a job's exception is raised
    queued.testing.drain_all()         # every class's, until none is left

    with queued.testing.inline():      # perform runs at once, in this process
        HardWorker.perform_async("bob", 5)

    queued.testing.disable()           # pushes go to Redis again (the default)

Each of ``fake()``, ``inline()`` and ``disable()`` sets the mode for the whole process at once
and returns an object that, used as a ``with`` block, puts the previous mode back at its end.

What both test modes share with a real worker: a push is checked and encoded exactly as for
Redis (strict arguments refuse what JSON would change, then the payload goes through JSON, so
the job gets what it would get from Redis), client middleware runs around every push and server
middleware around every run, ``async def perform`` runs to its end, ``self.jid``, ``self.queue``,
``self.msg`` and ``self.task_id`` are set, ``say()``, ``release()``, ``bury()`` and
``touch()`` work, tasks keep their jobs' states and push their callbacks, and inside a Django
transaction a push still waits for the commit (queued.django; TestCase's
``captureOnCommitCallbacks(execute=True)`` runs them). What they do not do: no timeout is
enforced and no retry happens; the job's exception comes to the caller instead (``drain()``
raises it, an inline push raises it), and a ``JobFailed`` too.

Scheduled jobs (``perform_in``, ``set(wait=...)``) are listed with their time (``"at"``) in fake
mode; ``drain()`` runs them with the others, ``drain(until=time.time())`` only those due by
then. Inline mode runs them at once. A job that releases itself goes back on its class's list
(with ``"at"`` for a delay) and a drain does not run it twice; one that buries itself goes to
``queued.testing.dead``; one past its ``expires_at`` is not run (its ``on_expired`` is called) and
goes to ``queued.testing.expired``. ``tick(name)`` pushes what a tick of a ``@queued.periodic`` schedule
pushes. docs/testing.md has the whole story and the pytest fixtures
(``queued.testing.pytest_plugin``: ``queued_fake``, ``queued_inline``).
"""
from __future__ import annotations

from .modes import disable, fake, inline, mode
from .drain import drain_all
from .store import clear_all, dead, expired, jobs, tick

__all__ = ["fake", "inline", "disable", "mode", "jobs", "drain_all", "clear_all", "dead",
           "expired", "tick"]
