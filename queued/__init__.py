"""queued: a prefork daemon that runs Sidekiq-format jobs from Redis and never loses one.

Producer and job API::

    import queued

    class HardWorker(queued.Job):
        queued_options = {"queue": "critical", "retry": 5, "timeout": 30}
        def perform(self, name, count): ...

    HardWorker.perform_async("bob", 5)
"""
__version__ = "0.1.0"

from .arguments import strict_args  # noqa: E402
from .client import (Client, configure, default_client, get_async_redis,  # noqa: E402
                     get_redis)
from .errors import (JobArgumentsError, JobFailed, JobTimeout, OverLimit,  # noqa: E402
                     QueuedError)
from .events import error_handlers, on  # noqa: E402
from .job import Job, job  # noqa: E402
from .jobregistry import registry  # noqa: E402
from .limiter import Limiter  # noqa: E402
from .middleware import client_middleware, server_middleware  # noqa: E402
from .ops import bury, release, say, touch  # noqa: E402
from .periodic import periodic  # noqa: E402
from .task import Task  # noqa: E402

__all__ = ["Job", "job", "registry", "Client", "configure", "default_client", "get_redis",
           "get_async_redis",
           "strict_args", "client_middleware", "server_middleware", "on", "error_handlers",
           "JobArgumentsError", "JobFailed", "JobTimeout", "QueuedError", "release", "touch", "bury",
           "say", "Task", "periodic", "Limiter", "OverLimit",
           "__version__"]
