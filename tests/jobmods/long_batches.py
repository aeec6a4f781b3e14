"""Loaded (``require``) by a daemon whose test needs long batches of short jobs whatever the
machine's load: every batch doubles up to ``prefetch`` however long its jobs took
(worker.BATCH_SPAN: an hour), no job counts as one that may run long (runner.SLOW_JOB: an hour,
so no job's start sends the acks before it: only the worker's ACK_AFTER does), and nothing
held is given back (giveback.HOLD_LIMIT: a minute). The master imports it before it forks its
workers, which share the values."""
from queued.server import giveback, runner, worker

worker.BATCH_SPAN = 3600.0
runner.SLOW_JOB = 3600.0
giveback.HOLD_LIMIT = 60.0
