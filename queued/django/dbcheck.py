"""At boot: can the databases serve every worker? A daemon of P processes of T threads each
holds up to P x T connections (or P x the pool's max_size with Django's connection pool),
plus the master's while it boots; past the server's ``max_connections`` the last workers fail
their jobs with "too many clients". Checked once, as a warning (the server's limit is shared
with the web processes and may change): PostgreSQL and MySQL are asked; others are skipped.
"""
from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("queued.django")


def needs(processes: int, threads: int, pool: Any) -> tuple[int, list[str]]:
    """(connections the workers may hold at once, warnings about the pool)."""
    notes = []
    per_process = threads
    if isinstance(pool, dict) or pool is True:
        max_size = pool.get("max_size") if isinstance(pool, dict) else None
        min_size = pool.get("min_size", 4) if isinstance(pool, dict) else 4
        if max_size is None:
            max_size = min_size  # psycopg_pool's default: max_size = min_size
        if max_size < threads:
            notes.append(f"its pool holds at most {max_size} connection(s) per process for "
                         f"{threads} job thread(s): jobs will wait for a connection")
        per_process = max(max_size, min_size)
    return processes * per_process, notes


def assess(alias: str, processes: int, threads: int, pool: Any, max_connections: int | None,
           reserved: int = 0, in_use: int = 0) -> list[str]:
    """The warnings for one database (pure: the numbers are given)."""
    need, notes = needs(processes, threads, pool)
    if max_connections is not None:
        free = max_connections - reserved - in_use
        if need > free:
            notes.append(f"{processes} process(es) x {need // processes} connection(s) = "
                         f"{need} may be open at once, but the server takes "
                         f"{max_connections} (max_connections) - {reserved} reserved - "
                         f"{in_use} open now = {free} more")
    return [f"database {alias!r}: {note}" for note in notes]


#: Seconds the check waits to connect to PostgreSQL (libpq's PGCONNECT_TIMEOUT, unless the
#: environment sets it): a database host that does not answer must not hold the boot up.
CONNECT_TIMEOUT = "5"


def warn(config) -> None:
    """Log a warning for each database that cannot serve ``config``'s workers."""
    from django.db import connections
    threads = getattr(config, "threads", 1)  # (the threads setting, where it exists)
    had_timeout = "PGCONNECT_TIMEOUT" in os.environ
    os.environ.setdefault("PGCONNECT_TIMEOUT", CONNECT_TIMEOUT)
    try:
        for alias in connections:
            conn = connections[alias]
            pool = (conn.settings_dict.get("OPTIONS") or {}).get("pool")
            try:
                limits = _server_limits(conn)
            except Exception as e:  # noqa: BLE001 - a database down at boot is not our error
                log.warning("database %r: could not check max_connections (%s: %s)", alias,
                            type(e).__name__, " ".join(str(e).split()))
                limits = (None, 0, 0)
            for line in assess(alias, config.concurrency, threads, pool, *limits):
                log.warning("%s", line)
    finally:
        if not had_timeout:
            os.environ.pop("PGCONNECT_TIMEOUT", None)


def _server_limits(conn) -> tuple[int | None, int, int]:
    """(max_connections, reserved for superusers, open now by others) from the server."""
    if conn.vendor == "postgresql":
        with conn.cursor() as cur:
            cur.execute("SELECT current_setting('max_connections')::int, "
                        "current_setting('superuser_reserved_connections')::int, "
                        "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                        "'client backend' AND pid <> pg_backend_pid())")
            return tuple(cur.fetchone())
    if conn.vendor == "mysql":
        with conn.cursor() as cur:
            cur.execute("SELECT @@max_connections")
            (limit,) = cur.fetchone()
            cur.execute("SHOW STATUS LIKE 'Threads_connected'")
            return int(limit), 0, max(int(cur.fetchone()[1]) - 1, 0)
    return None, 0, 0
