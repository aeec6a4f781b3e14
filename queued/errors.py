"""queued's exception hierarchy and the exit codes the master and workers agree on."""
from __future__ import annotations

#: Exit statuses. A worker that exits with WORKER_BOOT_ERROR failed before it could run
#: any job; the master backs off before respawning it. APP_LOAD_ERROR from the master
#: means the job code could not be imported at all: respawning cannot help.
#: EXIT_REDIS_ERROR from the master: it stopped while Redis was unreachable, leaving jobs
#: reserved under its registration (another master puts them back once its lease expires).
EXIT_OK = 0
EXIT_CONFIG_ERROR = 2
WORKER_BOOT_ERROR = 3
APP_LOAD_ERROR = 4
EXIT_REDIS_ERROR = 5


class QueuedError(Exception):
    """Base class for queued's own errors."""


class ConfigError(QueuedError):
    """A bad config file or command line. The message names the key and the file."""


class AppLoadError(QueuedError):
    """The job code named by ``require`` could not be imported."""


class PayloadError(QueuedError):
    """A queue element that is not a usable Sidekiq job (bad JSON, wrong shape)."""


class JobArgumentsError(QueuedError, TypeError, ValueError):
    """A push's arguments that JSON would not give back as they are (``strict_args``). A
    TypeError and a ValueError too: what json.dumps raises for such values."""


class UnknownJobClass(QueuedError):
    """The payload names a job class that is not registered in this process."""


class JobTimeout(BaseException):
    """Raised inside a job by SIGALRM when it runs past its timeout.

    Derived from BaseException so ``except Exception`` in job code cannot swallow it.
    The failure path treats it as an ordinary failure (retry or dead).
    """


class JobFailed(Exception):
    """Raised by a job for a business failure (seed 000's "this product cannot be registered"):
    the job is not retried. In a task its record says ``failed`` with this message; outside a
    task it goes to ``dead`` at once, so an operator sees it. Any other exception is a system
    error, retried by the job's policy."""

    def __init__(self, reason: str = ""):
        super().__init__(reason or "failed")
        self.reason = reason or "failed"


class OverLimit(QueuedError):
    """A limiter (queued.Limiter) had no unit for the caller within its ``wait_timeout``.
    Raised out of a job's ``perform`` it is no failure: the worker reschedules the job
    (server/guards.py), ``reschedule`` times at most, then it takes the retry path.
    ``limiter`` is the limiter; ``wait`` the seconds until it has room, when known (bucket,
    window, leaky), else None."""

    def __init__(self, limiter, wait: float | None = None):
        when = f"; room in {wait:.3f}s" if wait is not None else ""
        super().__init__(f"{limiter.kind} limiter {limiter.name!r} is over its limit of "
                         f"{limiter.size}{when}")
        self.limiter = limiter
        self.wait = wait


class WorkerKilled(QueuedError):
    """Recorded as the error of a job whose worker process died under it (poison pill)."""


class HaltMaster(BaseException):
    """Unwinds the master loop with an exit status."""

    def __init__(self, reason: str, exit_status: int):
        super().__init__(reason)
        self.reason = reason
        self.exit_status = exit_status
