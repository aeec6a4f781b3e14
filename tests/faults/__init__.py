"""The fault and bad-input suite (issue 3, section 2): real daemons, real processes, real
Redis servers killed, restarted and frozen. Each test prints one summary line, a row of the
table in docs/reliability.md (``pytest tests/faults -s -q -p no:cacheprovider``)."""
