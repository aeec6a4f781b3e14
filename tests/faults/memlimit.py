"""Puts every worker under a memory limit, as ``ulimit -v`` would: RLIMIT_AS at the worker's
size when forked plus 256 MiB, set in the child by an at-fork hook (the master is not
limited)."""
import os
import resource

HEADROOM = 256 << 20


def _limit() -> None:
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + HEADROOM, size + HEADROOM))


os.register_at_fork(after_in_child=_limit)
