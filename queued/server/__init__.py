"""The daemon: the ``queued`` command, its master and workers, and every step a job takes in
them (fetch, run, fail, recover, schedule, heartbeat). Imports the top level (keys, payload,
config, connection, job, client, ...); never the operator's side (queued.admin), and nothing
at the top level imports it but the ``python -m queued`` entry point."""
