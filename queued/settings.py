"""The settings table: every setting queued has, with its default, parser and help text, in
one line of the ``Config`` class body; ``SETTINGS``, ``ALIASES`` and ``describe()`` are derived
from it, and ``parse()`` reads one value with an error naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from .groups import Group, parse_groups
from .periodic import Schedule, SchedulerOptions, parse_schedule, parse_scheduler
from .redisopts import DEFAULT_REDIS_URL, RedisOptions, redis_options
from .values import (Invalid, boolean, choice, error, host_port, integer, optional_integer,
                     optional_seconds, path, queues, redis_url, seconds, strings, text, word)

#: Read when no -C is given and it exists, as Sidekiq does (relative to the working directory).
DEFAULT_CONFIG_FILE = os.path.join("config", "sidekiq.yml")
# Sidekiq's order of precedence; with none of them set Sidekiq says "development", and so do
# we when choosing a file section (Config.environment itself stays None).
ENVIRONMENT_VARS = ("APP_ENV", "RAILS_ENV", "RACK_ENV")
DEFAULT_SECTION = "development"


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    parse: Callable[[Any], Any]
    help: str
    aliases: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()       # command-line spelling, for the parser and for errors
    not_in_file: str | None = None    # why the file may not set it, when it may not


def _s(default: Any, parse: Callable[[Any], Any], help: str, **extra: Any) -> Any:
    return dataclasses.field(default=default, metadata={"parse": parse, "help": help, **extra})


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """Every setting of one queued process. Build it with ``load()`` or ``from_dict()``."""

    config_file: str | None = _s(None, path, "Read settings from this YAML file (Sidekiq's "
                                 f"sidekiq.yml); without -C, {DEFAULT_CONFIG_FILE} in the working "
                                 "directory if it exists.",
                                 flags=("-C", "--config"), not_in_file="use -C")
    environment: str | None = _s(None, word, "Environment section of the file to use "
                                 f"(else $APP_ENV, $RAILS_ENV, $RACK_ENV, else {DEFAULT_SECTION}).",
                                 flags=("-e", "--environment"),
                                 not_in_file="use -e or APP_ENV/RAILS_ENV/RACK_ENV")
    config_source: str | None = _s(None, text, "Where the settings were read when not from a "
                                   "file: Django's settings.QUEUED (queued.django).",
                                   not_in_file="queued records it")
    section: str | None = _s(None, word, "The environment section of the file in effect: the "
                             f"one -e (else $APP_ENV..., else '{DEFAULT_SECTION}') names, if the "
                             "file has it.", not_in_file="it follows from -e and the file")
    concurrency: int = _s(os.cpu_count() or 2, integer(1), "Number of worker processes.",
                          flags=("-c", "--concurrency"))
    threads: int = _s(1, integer(1), "Jobs each worker process runs at once: sync jobs on its "
                      "threads, async ones on its event loop (jobs at once = concurrency x "
                      "threads). 1: one job at a time, its time limit by SIGALRM.",
                      flags=("--threads",))
    queues: tuple[tuple[str, int], ...] = _s(
        (("default", 1),), queues, "Queues to fetch from, as names (strict order) or "
        "[name, weight] (weighted random).", flags=("-q", "--queue"))
    strict: bool = _s(True, boolean, "Strict queue order: true unless a queue has a weight > 0.",
                      not_in_file="it follows from the queue weights")
    groups: tuple[Group, ...] = _s((), parse_groups, "Queue groups with worker processes of "
                                   "their own (Sidekiq 7's capsules): name -> queues (as "
                                   "queues:), concurrency (processes, default 1), threads "
                                   "(default 1). Other queues use the top-level settings. "
                                   "See docs/migrating.md.")
    shutdown_timeout: float = _s(25.0, seconds(0, above=True),
                                 "Seconds a graceful stop waits for running jobs.",
                                 aliases=("timeout",), flags=("-t", "--timeout"))
    verbose: bool = _s(False, boolean, "Log at DEBUG level.", flags=("-v", "--verbose"))
    tag: str = _s("", text, "Shown in the process title and the Web UI.", flags=("-g", "--tag"))
    labels: tuple[str, ...] = _s((), strings, "Extra labels shown in the Web UI.")
    require: tuple[str, ...] = _s((), strings, "Python modules (app.jobs) or files "
                                  "(app/jobs.py) that define the jobs. Paths resolve against the "
                                  "working directory, which goes first on sys.path (as for "
                                  "python -m).", flags=("-r", "--require"))
    serve_no_jobs: bool = _s(False, boolean, "Run no workers and take no jobs: a process only "
                             "for the scheduler (due scheduled jobs and retries onto their "
                             "queues) and recovery. Without it queued refuses to start when the "
                             "job code registers no job class.", flags=("--serve-no-jobs",))
    redis_url: str = _s(DEFAULT_REDIS_URL, redis_url, "Redis to use. $REDIS_URL wins over the "
                        "file, --redis-url over both.", flags=("--redis-url",))
    redis: RedisOptions | None = _s(None, redis_options, "Sidekiq's redis: mapping, instead of "
                                    "redis_url: url, username, password, db, ssl, ssl_params "
                                    "(ca_file, ca_path, cert, key, verify_mode), connect_timeout; "
                                    "for Redis Sentinel, sentinels (host:port list), "
                                    "master_name, role, sentinel_username, sentinel_password.")
    redis_source: str = _s("the default", text, "Where redis_url came from (--redis-url, "
                           "REDIS_URL, the file, the default, embedded_redis); logged at start.",
                           not_in_file="queued records it")
    namespace: str | None = _s(None, word, "Prefix for every Redis key (redis-namespace style).")
    embedded_redis: str | None = _s(None, path, "Run our own redis-server with its data in this "
                                    "directory (relative to the working directory).")
    job_timeout: float | None = _s(None, optional_seconds,
                                   "Default job time limit in seconds (0 or null: none).")
    timeout_grace: float = _s(5.0, seconds(0),
                              "Seconds past a job's timeout before the master kills its worker.")
    lease_timeout: float = _s(30.0, seconds(2), "Seconds a reservation lives without renewal.")
    prefetch: int = _s(32, integer(1),
                       "Most jobs a worker reserves in one round trip while jobs are short.")
    max_payload_bytes: int = _s(64 * 2**20, integer(1),
                                "Largest job payload a worker runs; larger ones go to dead.")
    max_retries: int = _s(25, integer(0), "Retries for a job that does not set its own.")
    dead_max_jobs: int = _s(10000, integer(0), "Most jobs kept in the dead set.")
    dead_timeout_in_seconds: int = _s(15552000, integer(0),
                                      "Age in seconds after which dead jobs are trimmed.")
    max_crashes: int = _s(3, integer(1),
                          "Times a job may kill its worker before it goes to dead.")
    max_memory_mb: int | None = _s(None, optional_integer(1), "A worker whose RSS (MiB) is over "
                                   "this after a job leaves and a fresh one takes its place "
                                   "(null or 0: never).")
    max_jobs: int | None = _s(None, optional_integer(1), "A worker leaves after this many jobs "
                              "(plus its jitter) and a fresh one takes its place (null or 0: "
                              "never).")
    max_jobs_jitter: int = _s(0, integer(0), "Each worker's max_jobs is raised by a random "
                              "0..this, so workers do not all leave at once (gunicorn's "
                              "max_requests_jitter).")
    scheduler_poll_interval: float = _s(0.05, seconds(0, above=True),
                                        "How often the scheduler leader checks schedule and retry.")
    poll_interval_average: float = _s(5.0, seconds(0, above=True),
                                      "Backstop poll interval of the non-leader processes.",
                                      aliases=("average_scheduled_poll_interval",))
    heartbeat_interval: float = _s(5.0, seconds(0, above=True),
                                   "Seconds between process heartbeats.")
    fetch_timeout: float = _s(2.0, seconds(0, above=True),
                              "Seconds an idle worker blocks in Redis before looking around.")
    job_logging: bool = _s(True, boolean, "Log one line at the end of every job.")
    pidfile: str | None = _s(None, path, "Write the master's pid here (Sidekiq 5 key; relative "
                             "to the working directory).")
    logfile: str | None = _s(None, path, "Log here instead of stderr (Sidekiq 5 key; relative "
                             "to the working directory).")
    log_format: str = _s("text", choice("text", "json"), "text (Sidekiq's line shape) or json "
                         "(one JSON object per line, for log shippers).")
    scheduler: SchedulerOptions | None = _s(
        None, parse_scheduler, "Periodic jobs in sidekiq-scheduler's dialect: schedule: (name -> "
        "cron: or every:, class, queue, args, description, enabled, catch_up), enabled, "
        "listened_queues_only. See docs/periodic.md.")
    schedule: tuple[Schedule, ...] = _s((), parse_schedule, "The older top-level form of "
                                        "scheduler.schedule (sidekiq-scheduler 2-4); not both.")
    metrics: tuple[str, int] | None = _s(None, host_port, "HOST:PORT where the master serves "
                                         "Prometheus metrics at /metrics (needs the metrics "
                                         "extra: pip install 'queued-jobs[metrics]'); off if "
                                         "unset.")
    record_metrics: bool = _s(True, boolean, "Count each job class's runs, failures and run "
                              "times (shared memory), written to Redis on each heartbeat in "
                              "Sidekiq's metrics layouts and served at metrics:.")

    @property
    def queue_names(self) -> tuple[str, ...]:
        """Every queue this daemon serves: the top-level ones, then each group's."""
        return tuple(dict.fromkeys([*(name for name, _ in self.queues),
                                    *(q for g in self.groups for q in g.queue_names)]))

    @property
    def worker_groups(self) -> tuple[Group, ...]:
        """The shapes of worker processes: the top-level queues' (if they have queues and
        workers), then each group's."""
        top = (Group("", self.queues, self.strict, self.concurrency, self.threads),)
        return (top if self.queues and self.concurrency else ()) + self.groups

    @property
    def process_count(self) -> int:
        """Worker processes, every group's together."""
        return sum(g.concurrency for g in self.worker_groups)

    @property
    def jobs_at_once(self) -> int:
        """Jobs the daemon runs at once: each group's processes times their threads."""
        return sum(g.concurrency * g.threads for g in self.worker_groups)

    @property
    def max_threads(self) -> int:
        return max((g.threads for g in self.worker_groups), default=1)

    @property
    def weighted_queues(self) -> tuple[str, ...]:
        """Sidekiq's expansion: each name repeated max(weight, 1) times, for random choice."""
        return tuple(name for name, weight in self.queues for _ in range(max(weight, 1)))

    @property
    def schedules(self) -> tuple[Schedule, ...]:
        """The file's periodic jobs, from whichever of the two forms it uses."""
        return self.scheduler.schedule if self.scheduler else self.schedule

    @property
    def log_level(self) -> str:
        return "DEBUG" if self.verbose else "INFO"


SETTINGS: dict[str, Setting] = {
    f.name: Setting(f.name, f.default, **f.metadata) for f in dataclasses.fields(Config)}
ALIASES: dict[str, str] = {a: s.name for s in SETTINGS.values() for a in s.aliases}


def describe() -> list[tuple[str, Any, str]]:
    """(name, default, help) for every setting, in table order, for docs and --help text."""
    return [(s.name, s.default, s.help) for s in SETTINGS.values()]


def parse(setting: Setting, value: Any, source: str, label: str) -> Any:
    try:
        return setting.parse(value)
    except Invalid as exc:
        if exc.unknown:
            parent = label + "".join(f".{k}" for k in exc.sub.split(".")[:-1])
            hint = f" (did you mean '{parent}.{exc}'?)" if str(exc) else ""
            raise error(f"{source}: unknown key '{label}.{exc.sub}'{hint}") from None
        raise error(f"{source}: {label}{'.' + exc.sub if exc.sub else ''}: {exc}") from None
