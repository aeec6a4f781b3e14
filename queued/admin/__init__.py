"""The operator's side: the Python API (api.py, also ``queued.api``), ``queuedctl``, and the
dashboard and metrics as they come. Imports the top level (keys, payload, connection, ...);
never the daemon (queued.server), which never imports this either: the Redis layout and
``keys.py`` are all the two share."""
