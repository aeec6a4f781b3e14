"""What frames every page (issue 20): the stats bar, each figure a link to the page that explains
it, and the footer saying which Redis (its URL without the password), which namespace and
which queued this is. An on-call engineer with two dashboards open in two tabs must see at a
glance which cluster each one shows.

The bar is read with every page (Admin.stats: two pipelines, whatever the number of jobs). A
page that cannot read it (Redis down, a key of another type) shows no bar and says why itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import redis as redis_lib

from ... import __version__

#: The bar: (the Stats.as_dict key, its label, the route it links to, that route's params,
#: a fragment). Sidekiq's Web UI links its summary bar the same way.
BAR = (("processed", "Processed", "overview", {}, "history"),
       ("failed", "Failed", "job_metrics", {}, ""),
       ("busy", "Busy", "busy", {}, "running"),
       ("enqueued", "Enqueued", "queues", {}, ""),
       ("scheduled", "Scheduled", "jobset", {"set": "scheduled"}, ""),
       ("retries", "Retries", "jobset", {"set": "retries"}, ""),
       ("dead", "Dead", "jobset", {"set": "dead"}, ""),
       ("processes", "Processes", "busy", {}, "processes"))


#: The menu: (route name, label, params). An entry whose route the app lacks is left out (the
#: Limits page is issue 21's: it shows once its route is in the app).
NAV = (("overview", "Overview", {}), ("busy", "Busy", {}), ("queues", "Queues", {}),
       ("jobset", "Scheduled", {"set": "scheduled"}), ("jobset", "Retries", {"set": "retries"}),
       ("jobset", "Dead", {"set": "dead"}), ("tasks", "Tasks", {}), ("cron", "Cron", {}),
       ("job_metrics", "Metrics", {}), ("limits", "Limits", {}))


def nav(routes) -> tuple:
    """NAV, less the entries whose route is not among ``routes`` (the app's)."""
    names = {getattr(route, "name", None) for route in routes}
    return tuple(entry for entry in NAV if entry[0] in names)


@dataclass(frozen=True)
class Footer:
    redis: str
    namespace: str | None
    version: str = __version__


def stats_bar(admin) -> dict | None:
    """Admin.stats() as the bar shows it, or None when Redis cannot give it now."""
    try:
        return admin.stats().as_dict()
    except redis_lib.RedisError:
        return None


def redis_location(client: redis_lib.Redis) -> str:
    """The client's Redis as a URL with no password (a user name stays: it says which ACL
    user the dashboard acts as)."""
    pool = client.connection_pool
    kw = pool.connection_kwargs
    db = kw.get("db", 0)
    user = f"{kw['username']}@" if kw.get("username") else ""
    service = getattr(pool, "service_name", None)
    if service is not None:  # redis+sentinel://: the Sentinels asked, and the service
        manager = getattr(pool, "sentinel_manager", None)
        hosts = ",".join(_address(s.connection_pool.connection_kwargs)
                         for s in getattr(manager, "sentinels", ()))
        return f"redis+sentinel://{user}{hosts}/{service}/{db}"
    if kw.get("path"):
        return f"unix://{user}{kw['path']}?db={db}"
    scheme = "rediss" if issubclass(pool.connection_class, redis_lib.SSLConnection) else "redis"
    return f"{scheme}://{user}{_address(kw)}/{db}"


def _address(kw: dict) -> str:
    host = str(kw.get("host", "localhost"))
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{kw.get('port', 6379)}"
