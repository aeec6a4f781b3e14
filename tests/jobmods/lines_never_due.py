"""Loaded (``require``) by a daemon whose test needs a worker's done lines held until
something other than their age writes them (log.JobLog.LINES_DUE: an hour), whatever the
machine's load: on a loaded host a batch's first line could be 0.1 s old by its end and go
out with flush_due, hiding a missing flush. The master imports it before it forks its
workers, which share the value."""
from queued.server import log

log.JobLog.LINES_DUE = 3600.0
