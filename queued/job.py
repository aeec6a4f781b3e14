"""The Python job API: ``queued.Job`` subclasses, the name registry, ``set()`` and the decorator.

This module owns:

- ``Job``: subclasses register themselves by name (the class name, or ``queued_options["name"]``
  such as ``"Billing::InvoiceJob"`` for a Ruby producer's class). Only registered classes ever
  run: the worker looks a payload's ``class`` up in ``registry`` and never imports anything.
- ``registry``: name -> class (jobregistry.py owns it; it is named here, and as
  ``queued.registry``, for the job API's users).
- ``Job.perform_async/perform_in/perform_at/perform_bulk/set``: build an item the way
  Sidekiq::Worker 6.4 does (same keys, same key order) and hand it to ``queued.client``.
- ``job``: ``@queued.job`` for plain functions.

Time arguments follow Sidekiq: a number below 1_000_000_000 is an interval from now, anything
else an absolute epoch (so ``perform_at`` and ``perform_in`` are the same method, as in Ruby);
``datetime`` is absolute (naive = local time), ``timedelta`` relative. A time not in the future
enqueues right away. Unlike Ruby's Setter, a later time that is not in the future (a second
``set(wait=...)``, or ``perform_in`` on a ``set(wait=...)``) clears an earlier ``at`` instead
of leaving it in place: the last time given wins. And unlike Ruby's Setter, which merges any
key into the payload, ``set()`` takes the per-push options by name and payload keys of the
caller's own only as ``extra={...}``: a typo (``queu="low"``) is a TypeError, not a job on the
wrong queue. Arguments are checked as Sidekiq 7 checks them (``queued.strict_args``).
"""
from __future__ import annotations

import datetime as _dt
import difflib
import functools
import inspect
import numbers
from typing import Any, Callable, NoReturn

from . import client as _client
from . import ops
from .arguments import check_json
from .jobregistry import registry, where
from .payload import MAX_SECONDS

#: Options a job class may set in ``queued_options``.
OPTION_KEYS = frozenset(
    {"queue", "retry", "backtrace", "dead", "retry_queue", "tags", "timeout", "name", "abstract",
     "threads", "unique_for", "unique_until", "expires_in"})
#: Class options that Sidekiq copies into every payload (when set), in addition to retry/queue.
#: (``expires_in`` becomes the payload's ``expires_at`` at the push: expiry.py.)
PAYLOAD_OPTION_KEYS = frozenset({"backtrace", "dead", "retry_queue", "tags", "unique_for",
                                 "unique_until", "expires_in"})
#: What ``Job.set()`` takes besides ``wait``/``wait_until``/``extra``: the options that make
#: sense per push (Sidekiq's Setter merges any key into the item; a typo would then be a silent
#: payload key) and ``jid``, which a producer may choose for one push, as Sidekiq's allows.
SET_KEYS = frozenset(OPTION_KEYS - {"name", "abstract", "threads"} | {"jid"})
#: Payload keys that ``set(extra=...)`` refuses: perform_* writes class and args, the push
#: writes enqueued_at, and an "at" is a time for ``wait_until``.
_WRITTEN_BY_PUSH = frozenset({"class", "args", "at", "enqueued_at"})
#: Names other libraries give to what ``set()`` calls otherwise (Celery: countdown, eta).
_SET_SYNONYMS = {"at": "wait_until", "eta": "wait_until", "countdown": "wait", "delay": "wait",
                 "queue_name": "queue", "retries": "retry"}
#: Sidekiq's DEFAULT_WORKER_OPTIONS, in Sidekiq's order.
DEFAULT_OPTIONS = {"retry": True, "queue": "default"}
#: Like Sidekiq: an interval at or above this is an absolute epoch.
_ABSOLUTE_EPOCH = 1_000_000_000


# --- options ---------------------------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


#: key -> (test, what the value must be). None is accepted where it means "not set".
_OPTION_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "queue": (_nonempty_str, "a non-empty str"),
    "retry": (lambda v: isinstance(v, bool) or (_is_int(v) and v >= 0),
              "True, False or an int >= 0"),
    "backtrace": (lambda v: v is None or isinstance(v, bool) or (_is_int(v) and v >= 0),
                  "True, False or an int >= 0"),
    "dead": (lambda v: v is None or isinstance(v, bool), "True or False"),
    "retry_queue": (lambda v: v is None or _nonempty_str(v), "a non-empty str"),
    "tags": (lambda v: v is None or isinstance(v, list), "a list"),
    "timeout": (lambda v: v is None or (_is_real(v) and v > 0), "a number of seconds > 0"),
    # issue 21: unique.py and expiry.py
    "unique_for": (lambda v: v is None or (_is_real(v) and v > 0), "a number of seconds > 0"),
    "unique_until": (lambda v: v is None or v in ("success", "start"), '"success" or "start"'),
    "expires_in": (lambda v: v is None or (_is_real(v) and v > 0), "a number of seconds > 0"),
    # False: not thread-safe, runs alone in its worker's main thread (server/runner.py)
    "threads": (lambda v: isinstance(v, bool), "True or False"),
    "name": (_nonempty_str, "a non-empty str"),
    "abstract": (lambda v: isinstance(v, bool), "True or False"),
    "jid": (_nonempty_str, "a non-empty str"),
}


#: The options that are spans of seconds, at most payload.MAX_SECONDS.
_SPANS = frozenset({"timeout", "unique_for", "expires_in"})


def check_options(owner: str, options: Any, allowed: frozenset = OPTION_KEYS) -> None:
    """Raise TypeError naming ``owner`` and the key for an unknown option or a bad value."""
    if not isinstance(options, dict):
        raise TypeError(f"{owner}: queued_options must be a dict, not {type(options).__name__}")
    for key, value in options.items():
        if key not in allowed:
            raise TypeError(f"{owner}: unknown queued option {key!r}{did_you_mean(key, allowed)}"
                            f" (known: {', '.join(sorted(allowed))})")
        test, what = _OPTION_CHECKS[key]
        if not test(value):
            raise TypeError(f"{owner}: queued option {key!r} must be {what}, not {value!r}")
        if key in _SPANS and value is not None and value > MAX_SECONDS:
            # (a bigger span fits nothing that must hold it: Redis's PX, setitimer: payload.py)
            raise ValueError(f"{owner}: queued option {key!r} must be at most {MAX_SECONDS} "
                             f"seconds (ten years), not {value!r}")


def did_you_mean(key: Any, known: Any, synonyms: dict[str, str] | None = None) -> str:
    """`` (did you mean 'queue'?)`` for a typo of a known name, else ``""``."""
    if not isinstance(key, str):
        return ""
    guess = (synonyms or {}).get(key)
    if guess is None:
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        guess = close[0] if close else None
    return f" (did you mean {guess!r}?)" if guess else ""


def resolve_at(when: Any, now: float) -> float:
    """An epoch from Sidekiq-style time input (see the module header)."""
    if isinstance(when, _dt.datetime):
        return when.timestamp()  # naive datetimes are local time
    if isinstance(when, _dt.timedelta):
        return now + when.total_seconds()
    if not _is_real(when):
        raise TypeError(f"a time must be seconds, an epoch, a datetime or a timedelta, "
                        f"not {type(when).__name__}")
    ts = float(when)
    return now + ts if ts < _ABSOLUTE_EPOCH else ts


# --- Job ---------------------------------------------------------------------------------------

class _FakeJobs:
    """``HardWorker.jobs``: the jobs queued.testing's fake mode holds for the class (the live
    list of their payloads as dicts; empty outside fake mode). Never touches Redis."""

    def __get__(self, obj: Any, owner: type) -> list[dict]:
        from .testing import store  # (only code that looks at .jobs loads queued.testing)
        return store.jobs_of(owner.queued_name or owner.__name__)


class Job:
    """Base class of every job. Subclass it, give it ``perform(self, *args)`` and optionally
    ``queued_options``; the subclass is registered the moment it is defined.

    ``queued_options`` keys: ``queue`` (default "default"), ``retry`` (True = 25 retries, an
    int = that many, 0 = none then dead, False = none and dropped), ``backtrace``, ``dead``,
    ``retry_queue``, ``tags`` (copied into every payload, as Sidekiq does), ``timeout``
    (seconds; looked up by the worker, never written to the payload), ``unique_for`` (seconds:
    a push of the same class, queue and args is dropped while one is pending, unique.py) and
    ``unique_until`` ("success", the default, or "start"), ``expires_in`` (seconds: a job not
    started by then is dropped, expiry.py), ``name`` (the name to serve; not inherited) and
    ``abstract`` (True = do not register this class; not inherited).
    Options are inherited along the MRO, subclasses overriding.
    """

    queued_options: dict[str, Any] = {}
    #: The name this class is registered under (None for an abstract class). Set at definition.
    queued_name: str | None = None
    #: Producers push through this ``queued.client.Client`` if set (a class attribute), else
    #: through ``queued.client.default_client()``. Anything that is not a queued Client is
    #: ignored, so a job keeping its own API client in ``client`` is not mistaken for one.
    client: Any = None

    # Set by the worker on the instance before perform() is called.
    #: The job id (24 hex chars), stable across retries.
    jid: str | None = None
    #: The queue the job was fetched from.
    queue: str | None = None
    #: The parsed payload dict (read it; changing it changes nothing in Redis).
    msg: dict | None = None
    #: The id of the task this job belongs to (``queued.Task``), None outside a task.
    task_id: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("queued_options", {})
        check_options(where(cls), own)
        if own.get("abstract", False):
            cls.queued_name = None
            return
        cls.queued_name = own.get("name") or cls.__name__
        registry.register(cls, cls.queued_name)

    #: The jobs queued.testing's fake mode holds for this class (``drain()`` runs them).
    jobs = _FakeJobs()

    # --- the worker's side (keep trivial) ---
    def perform(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.perform is not defined")

    def after_succeeded(self) -> None:
        """Called by the worker after perform() returned. No-op by default."""

    def after_failed(self, exc: BaseException) -> None:
        """Called by the worker after perform() raised ``exc`` (timeouts included)."""

    # --- job operations (ops.py: Beanstalkd's release, touch, bury) ---
    def release(self, delay: float = 0.0) -> NoReturn:
        """End this run without a failure; run the job again in ``delay`` seconds."""
        ops.release(delay)

    def touch(self) -> bool:
        """Renew the lease that keeps this job from being recovered elsewhere (ops.touch)."""
        return ops.touch()

    def bury(self, reason: str = "") -> NoReturn:
        """Send this job to dead now, on purpose."""
        ops.bury(reason)

    # --- tasks (queued.Task) ---
    def say(self, text: str) -> None:
        """Add a time-stamped line to this job's message log in its task (logged too)."""
        ops.say(text)

    @property
    def task(self) -> Any:
        """This job's task, reopened (``queued.Task``): jobs pushed in ``with self.task:``
        join it, and the task cannot complete before they end. None outside a task."""
        if self.task_id is None:
            return None
        from .task import Task  # (task.py imports job.py's callers; imported when used)
        return Task.find(self.task_id, client=self.queued_client())

    @classmethod
    def retry_in(cls, count: int, exc: BaseException) -> float | None:
        """Seconds until retry number ``count`` (0 = the first retry); None = Sidekiq's formula
        ``count**4 + 15 + jitter``. Sidekiq's ``sidekiq_retry_in``."""
        return None

    @classmethod
    def retries_exhausted(cls, msg: dict, exc: BaseException) -> None:
        """Called once when the job will not be retried again. Sidekiq's
        ``sidekiq_retries_exhausted``."""

    @classmethod
    def on_expired(cls, msg: dict) -> None:
        """Called once, in the worker, when the job is dropped unrun because it was not
        started before its ``expires_at`` (``expires_in``): ``msg`` is its payload."""

    # --- options ---
    @classmethod
    def get_options(cls) -> dict[str, Any]:
        """Sidekiq's defaults, then each class's ``queued_options`` from the base down
        (``name`` and ``abstract`` left out: they belong to one class only)."""
        merged = dict(DEFAULT_OPTIONS)
        for klass in reversed(cls.__mro__):
            own = klass.__dict__.get("queued_options")
            if own:
                merged.update((k, v) for k, v in own.items() if k not in ("name", "abstract"))
        return merged

    @classmethod
    def payload_defaults(cls) -> dict[str, Any]:
        """The keys Sidekiq's normalize_item puts before the item's own: retry, queue and the
        payload options that are set, in option order."""
        out = {}
        for key, value in cls.get_options().items():
            if key in ("retry", "queue") or (key in PAYLOAD_OPTION_KEYS and value is not None):
                out[key] = list(value) if isinstance(value, list) else value
        return out

    # --- the producer's side ---
    @classmethod
    def queued_client(cls) -> "_client.Client":
        c = cls.client
        return c if isinstance(c, _client.Client) else _client.default_client()

    @classmethod
    def set(cls, **options: Any) -> "Setter":
        return Setter(cls, options)

    @classmethod
    def perform_async(cls, *args: Any) -> str | None:
        return cls.queued_client().push({"args": list(args), "class": cls})

    @classmethod
    def perform_in(cls, interval: Any, *args: Any) -> str | None:
        now = _client.clock()
        ts = resolve_at(interval, now)
        item: dict[str, Any] = {"class": cls, "args": list(args)}
        if ts > now:
            item["at"] = ts
        return cls.queued_client().push(item)

    perform_at = perform_in

    @classmethod
    def perform_bulk(cls, args: Any, *, batch_size: int = 1000) -> list[str]:
        return Setter(cls, {}).perform_bulk(args, batch_size=batch_size)

    # --- queued.testing's fake mode (Sidekiq::Testing's drain and clear) ---
    @classmethod
    def drain(cls, until: float | None = None) -> int:
        """Run this class's fake-mode jobs here, in order (those they push too), until none
        is left (with ``until``, an epoch: none due by then); the number run. A job's
        exception is raised as it is."""
        from .testing import drain
        return drain.drain(cls.queued_name or cls.__name__, until)

    @classmethod
    def clear(cls) -> None:
        """Forget this class's fake-mode jobs."""
        from .testing import store
        store.clear(cls.queued_name or cls.__name__)


class Setter:
    """``Job.set(...)``: per-push options, chainable (``.set(...)`` again merges more).

    Takes the options that make sense per push (``queue``, ``retry``, ``backtrace``, ``dead``,
    ``retry_queue``, ``tags``, ``timeout``, ``unique_for``, ``unique_until``, ``expires_in``),
    ``jid`` (this push's job id, instead of a new
    one), ``wait`` (seconds or a timedelta from now) or ``wait_until`` (an epoch or a
    datetime), like Sidekiq and ActiveJob, ``extra``: a dict of payload keys of your own,
    written as they are (``set(extra={"tenant": 7})``, for a client or server middleware that
    reads them), and ``after_commit``: inside a database transaction a push waits for its
    commit (queued.django); ``False`` pushes at once, a database alias waits for that
    database's transaction (never written to the payload). Any other keyword is a TypeError,
    with a suggestion for a typo: a misspelt ``queu="low"`` would otherwise push to the
    class's queue with a stray payload key."""

    def __init__(self, job_class: type[Job], options: dict[str, Any]):
        self._job = job_class
        self._opts: dict[str, Any] = {}
        self._after_commit: Any = None
        self.set(**options)

    def set(self, *, wait: Any = None, wait_until: Any = None,
            extra: dict[str, Any] | None = None, after_commit: Any = None,
            **options: Any) -> "Setter":
        owner = f"{where(self._job)}.set()"
        if after_commit is not None:
            if not (isinstance(after_commit, bool) or _nonempty_str(after_commit)):
                raise TypeError(f"{owner}: after_commit must be True, False or a database "
                                f"alias, not {after_commit!r}")
            self._after_commit = after_commit
        for key in options:
            if key not in SET_KEYS:
                guess = did_you_mean(key, SET_KEYS | {"wait", "wait_until", "after_commit"},
                                     _SET_SYNONYMS)
                raise TypeError(f"{owner}: unknown option {key!r}{guess}; set() takes "
                                f"{', '.join(sorted(SET_KEYS))}, wait, wait_until and "
                                "after_commit, and payload keys of your own as extra={...}")
        check_options(owner, options, SET_KEYS)
        if extra is not None:
            self._check_extra(owner, extra)
        self._opts.update(options)
        self._opts.update(extra or {})
        interval = wait_until if wait_until is not None else wait
        if interval is not None:
            now = _client.clock()
            ts = resolve_at(interval, now)
            if ts > now:
                self._opts["at"] = ts
            else:
                self._opts.pop("at", None)
        return self

    def _check_extra(self, owner: str, extra: Any) -> None:
        """Payload keys of the caller's own: str keys that are no option (those are checked
        when given as keywords) and no key the push writes itself; plain JSON values."""
        if not isinstance(extra, dict):
            raise TypeError(f"{owner}: extra must be a dict of payload keys, "
                            f"not {type(extra).__name__}")
        for key in extra:
            if not isinstance(key, str) or not key:
                raise TypeError(f"{owner}: extra keys must be non-empty str, not {key!r}")
            if key in SET_KEYS or key in ("wait", "wait_until", "after_commit"):
                raise TypeError(f"{owner}: give {key!r} as set({key}=...), not in extra")
            if key in _WRITTEN_BY_PUSH:
                raise TypeError(f"{owner}: extra cannot set {key!r}: the push writes it")
        check_json(owner, extra, "extra")

    @property
    def options(self) -> dict[str, Any]:
        return dict(self._opts)

    def perform_async(self, *args: Any) -> str | None:
        item = {**self._opts, "args": list(args), "class": self._job}
        return self._job.queued_client().push(item, after_commit=self._after_commit)

    def perform_in(self, interval: Any, *args: Any) -> str | None:
        now = _client.clock()
        ts = resolve_at(interval, now)
        item = dict(self._opts)
        if ts > now:
            item["at"] = ts
        else:
            item.pop("at", None)
        item.update({"args": list(args), "class": self._job})
        return self._job.queued_client().push(item, after_commit=self._after_commit)

    perform_at = perform_in

    def perform_bulk(self, args: Any, *, batch_size: int = 1000) -> list[str]:
        """One push_bulk (one SADD + one LPUSH per ``batch_size`` jobs); returns the jids."""
        seqs = (list, tuple)
        if not isinstance(args, seqs) or not all(isinstance(a, seqs) for a in args):
            raise ValueError("perform_bulk takes a list of argument lists: [[1], [2]]")
        if "jid" in self._opts:
            raise ValueError("set(jid=...) names one job; perform_bulk gives each job its own")
        item = {**self._opts, "class": self._job, "args": [list(a) for a in args]}
        return self._job.queued_client().push_bulk(item, batch_size=batch_size,
                                                   after_commit=self._after_commit)


# --- function form -------------------------------------------------------------------------

class JobFunction:
    """What ``@queued.job`` returns: still the function when called, plus the producer API."""

    def __init__(self, fn: Callable[..., Any], job_class: type[Job]):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self.job_class = job_class

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<queued job function {self.job_class.queued_name!r} ({where(self._fn)})>"

    def perform_async(self, *args: Any) -> str | None:
        return self.job_class.perform_async(*args)

    def perform_in(self, interval: Any, *args: Any) -> str | None:
        return self.job_class.perform_in(interval, *args)

    perform_at = perform_in

    def perform_bulk(self, args: Any, *, batch_size: int = 1000) -> list[str]:
        return self.job_class.perform_bulk(args, batch_size=batch_size)

    def set(self, **options: Any) -> Setter:
        return self.job_class.set(**options)

    @property
    def jobs(self) -> list[dict]:
        return self.job_class.jobs

    def drain(self, until: float | None = None) -> int:
        return self.job_class.drain(until)

    def clear(self) -> None:
        self.job_class.clear()


def job(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """``@queued.job`` or ``@queued.job(queue="low", retry=3, name=...)`` on a plain function:
    registers a Job subclass (named after the function unless ``name=``) whose perform calls
    the function with the job's args."""
    if fn is None:
        return lambda f: job(f, **options)
    if not callable(fn) or isinstance(fn, type):
        raise TypeError(f"@queued.job decorates a function, not {fn!r}")

    if inspect.iscoroutinefunction(fn):
        async def perform(self: Job, *args: Any) -> Any:  # an async job (runs on the loop)
            return await fn(*args)
    else:
        def perform(self: Job, *args: Any) -> Any:
            return fn(*args)

    namespace = {"queued_options": dict(options), "perform": perform,
                 "__module__": fn.__module__, "__qualname__": fn.__qualname__,
                 "__doc__": fn.__doc__}
    job_class = type(fn.__name__, (Job,), namespace)
    return JobFunction(fn, job_class)
