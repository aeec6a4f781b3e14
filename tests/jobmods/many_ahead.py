"""Loaded (``require``) by a daemon whose test needs a worker of many jobs at once to ask for
more jobs while it holds some ahead of its busy lanes, whatever the machine's load: it holds
as many ahead as ``prefetch`` allows however long its jobs took (ahead.PREFETCH_WAIT: an
hour), so with a few held it always wants more. The master imports it before it forks its
workers, which share the value."""
from queued.server import ahead

ahead.PREFETCH_WAIT = 3600.0
