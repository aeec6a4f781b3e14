"""Pushes inside ``transaction.atomic()`` wait for the commit (Rails 7.2 made this ActiveJob's
default). A job pushed before its transaction commits can run before the rows it needs are
visible, or after they were rolled back: Celery's users meet both ("DoesNotExist" in a task
for a row that exists a moment later), and its ``delay_on_commit`` returns no id (#8976).

Here the push is checked and given its jid at once, the jid is returned, and the rest (client
middleware, then the write to Redis) runs in ``transaction.on_commit``: never if the
transaction rolls back (a savepoint rolled back drops the pushes made inside it, as Django
drops its callbacks). ``Job.set(after_commit=False)`` pushes at once; ``after_commit="other"``
waits for the transaction of the database ``other`` instead of the default one. A task's
writes (``queued.Task``) wait the same way, by the task's own ``after_commit``; inside a task's
block a push goes with its task, whatever its own ``after_commit`` (client.Client.push).

The check costs one attribute read per push (``in_atomic_block`` of this thread's connection
to the database; no query, no connection opened). Outside an ``atomic`` block, and under
manual transaction management (``set_autocommit(False)``), the push goes at once. In Django's
``TestCase`` every test runs inside a transaction that is rolled back: a push waits, as every
``on_commit`` callback does, until ``captureOnCommitCallbacks(execute=True)`` runs it.
"""
from __future__ import annotations

from typing import Any, Callable

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from .. import client


def defer(run: Callable[[], Any], using: Any) -> bool:
    """The client's commit hook: True when ``run`` now waits for the commit of the
    transaction open on this thread's connection to ``using`` (a database alias; None or
    True: the default database), False when none is open."""
    alias = DEFAULT_DB_ALIAS if using is None or using is True else using
    if not connections[alias].in_atomic_block:
        return False
    transaction.on_commit(run, using=alias)
    return True


def install() -> None:
    """Make every push in this process wait for the commit of an open transaction."""
    client.commit_hook = defer


def uninstall() -> None:
    client.commit_hook = None
