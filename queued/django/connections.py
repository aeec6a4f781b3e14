"""Django's database connections in the daemon: never shared across a fork, and never kept
past their use by a job.

A connection the master holds when it forks is a socket its child holds too; two processes
talking on one PostgreSQL connection corrupt each other's conversations ("SSL error:
decryption failed or bad record mac", "server closed the connection unexpectedly", a query
answered with another's rows: the trackers of Celery and RQ are full of them). So the master
closes its connections before every fork (the ``before_fork`` event), and each worker, and each
thread in it, opens its own on first use (Django's connections are per thread).

Around every job, ``close_old_connections()``, as Django does around every request: a
connection past ``CONN_MAX_AGE``, or left unusable by an error, is closed before the job and
after it; one within its age is kept for the next job. A job stopped by its timeout may have
been stopped in the middle of a query: its connections are closed outright.
"""
from __future__ import annotations

from django.db import close_old_connections, connections

from ..errors import JobTimeout


def close_all() -> None:
    """Close this thread's database connections (the master's, before a fork)."""
    connections.close_all()


class CloseOldConnections:
    """Server middleware, outermost (installed only in a Django project's daemon)."""

    def __call__(self, job, msg, queue, call_next):
        close_old_connections()
        try:
            return call_next()
        except JobTimeout:
            connections.close_all()
            raise
        finally:
            close_old_connections()
