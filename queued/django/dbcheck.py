"""At boot: can the databases serve every worker? A daemon of P processes of T threads each
holds up to P x T connections per database alias (or P x the pool's max_size with Django's
connection pool), plus the master's while it boots; past the server's ``max_connections`` the
last workers fail their jobs with "too many clients". Checked once, as a warning (the server's
limit is shared with the web processes and may change): PostgreSQL and MySQL are asked; others
are skipped.

Judged per server, not per alias: two aliases on one server (the same HOST and PORT: a
replica alias, a second database of the same cluster) share its ``max_connections``, so their
needs are added up and the server is asked once (each judged alone had the whole headroom to
itself). The check closes every connection before it asks and the one it asked on after, so
what it counts as open is the other clients' (its own first connection, left open, was counted
by the second alias's check).
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
    """The warnings for one database alias alone on its server (pure: the numbers are
    given)."""
    return assess_server([(alias, pool)], processes, threads, max_connections, reserved,
                         in_use)


def assess_server(aliases: list[tuple[str, Any]], processes: int, threads: int,
                  max_connections: int | None, reserved: int = 0,
                  in_use: int = 0) -> list[str]:
    """The warnings for the database aliases of one server, (alias, pool) each: a pool's
    notes per alias, and one for the server if their workers' connections together do not
    fit (pure: the numbers are given)."""
    out, need = [], 0
    for alias, pool in aliases:
        more, notes = needs(processes, threads, pool)
        need += more
        out += [f"database {alias!r}: {note}" for note in notes]
    if max_connections is not None:
        free = max_connections - reserved - in_use
        if need > free:
            names = (f"database {aliases[0][0]!r}" if len(aliases) == 1 else
                     f"databases {', '.join(repr(a) for a, _ in aliases[:-1])} and "
                     f"{aliases[-1][0]!r} (one server)")
            out.append(f"{names}: {processes} process(es) x {need // processes} "
                       f"connection(s) = {need} may be open at once, but the server takes "
                       f"{max_connections} (max_connections) - {reserved} reserved - "
                       f"{in_use} open now = {free} more")
    return out


#: Seconds the check waits to connect to PostgreSQL (libpq's PGCONNECT_TIMEOUT, unless the
#: environment sets it): a database host that does not answer must not hold the boot up.
CONNECT_TIMEOUT = "5"


def warn(config) -> None:
    """Log a warning for each database server that cannot serve ``config``'s workers (and
    each pool too small for a process's threads)."""
    from django.db import connections
    threads = getattr(config, "threads", 1)  # (the threads setting, where it exists)
    had_timeout = "PGCONNECT_TIMEOUT" in os.environ
    os.environ.setdefault("PGCONNECT_TIMEOUT", CONNECT_TIMEOUT)
    connections.close_all()  # (what is open now is the others', counted as such)
    try:
        for aliases in servers(connections).values():
            for line in _check_server(connections, aliases, config.concurrency, threads):
                log.warning("%s", line)
    finally:
        if not had_timeout:
            os.environ.pop("PGCONNECT_TIMEOUT", None)


def _check_server(connections, aliases: list[str], processes: int, threads: int) -> list[str]:
    """The warnings for one server, asked once on its first alias's connection (closed
    after, so the next server's count does not hold it)."""
    conn = connections[aliases[0]]
    try:
        limits = _server_limits(conn)
    except Exception as e:  # noqa: BLE001 - a database down at boot is not our error
        log.warning("%s: could not check max_connections (%s: %s)",
                    ", ".join(f"database {a!r}" for a in aliases), type(e).__name__,
                    " ".join(str(e).split()))
        limits = (None, 0, 0)
    finally:
        conn.close()
    pools = [(a, (connections[a].settings_dict.get("OPTIONS") or {}).get("pool"))
             for a in aliases]
    return assess_server(pools, processes, threads, *limits)


def servers(connections) -> dict[tuple, list[str]]:
    """The aliases of each database server: (vendor, HOST, PORT) -> aliases, in settings'
    order. A database without a server (SQLite: its file) is one of its own."""
    found: dict[tuple, list[str]] = {}
    for alias in connections:
        conn = connections[alias]
        s = conn.settings_dict
        if conn.vendor in ("postgresql", "mysql"):
            key: tuple = (conn.vendor, s.get("HOST") or "", str(s.get("PORT") or ""))
        else:
            key = (conn.vendor, alias)
        found.setdefault(key, []).append(alias)
    return found


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
