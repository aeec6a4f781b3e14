"""Loaded (``require``) by a daemon whose test needs a worker's batches to grow the same way on
a loaded machine as on a quiet one: every batch doubles up to ``prefetch`` however long its jobs
took (worker.BATCH_SPAN: an hour), and a job gives back what it holds behind it only after 2 s
(giveback.HOLD_LIMIT), which no quick job of the test comes near, so only the test's held job
does. The master imports it before it forks its workers, which share the values."""
from queued.server import giveback, worker

worker.BATCH_SPAN = 3600.0
giveback.HOLD_LIMIT = 2.0
