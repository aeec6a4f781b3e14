"""Expiring jobs (Sidekiq Pro's ``expires_in``): a job not started by its deadline is never run.

The producer gives ``expires_in`` (seconds: a class option, or ``set(expires_in=...)``); the
push turns it into the payload's ``expires_at`` (float epoch seconds; Sidekiq 8's integer
milliseconds are read too), counted from the job's run time for a scheduled job, from the push
otherwise (Sidekiq Pro's rule: a job scheduled in two hours with one hour to live expires in
three). A Ruby or PHP producer may write ``expires_at`` itself.

The worker checks it when it takes the job, before anything else (a job that waited in a
paused queue past its deadline is dropped as it is taken, never run), and again when a failure
would schedule a retry: a retry due after the deadline is not scheduled, the job expires then.
Nothing moves the deadline: a retry, a release or an over-limit reschedule keeps the payload's
``expires_at`` (Celery lost its ``expires`` on retry, its #980).

An expired job is counted (``queued:stat:expired``), its unique lock given up, its task told
(a final ``error`` whose class is ``Expired``: docs/limits.md says why not a success, as Sidekiq
Pro counts it in a batch), and its class's ``on_expired(msg)`` hook called (Sidekiq #5416).
"""
from __future__ import annotations

from typing import Any

from .payload import check_seconds, to_epoch

#: The producer's option (seconds) and the payload's deadline (epoch seconds).
EXPIRES_IN, EXPIRES_AT = "expires_in", "expires_at"
#: The error class a task records for an expired job.
ERROR_CLASS = "Expired"


def check_item(item: dict) -> None:
    """A push's ``expires_in`` (seconds, at most payload.MAX_SECONDS) and ``expires_at`` (an
    epoch a float holds): ValueError naming the key."""
    if EXPIRES_IN in item:
        check_seconds(EXPIRES_IN, item[EXPIRES_IN])
    if EXPIRES_AT in item:
        value = item[EXPIRES_AT]
        epoch = to_epoch(value)
        if epoch is None or not epoch > 0:
            raise ValueError(f'job "{EXPIRES_AT}" must be a number > 0 (an epoch), '
                             f'not {value!r}')


def stamp(msg: dict, start: float) -> None:
    """Replace a payload's ``expires_in`` by its ``expires_at``: ``start`` (the push, or the
    run time of a scheduled job) plus the seconds given. Called by the client on every job that
    has the key (the caller checks ``EXPIRES_IN in msg``)."""
    msg[EXPIRES_AT] = start + msg.pop(EXPIRES_IN)


def deadline(msg: dict) -> float | None:
    """The job's ``expires_at`` as epoch seconds, or None (none, or not a usable time: a
    foreign producer's odd value is ignored rather than dropping the job)."""
    value = to_epoch(msg.get(EXPIRES_AT))
    return value if value is not None and value > 0 else None


def expired(msg: dict, now: float) -> float | None:
    """The deadline if the job is past it at ``now``, else None."""
    at = deadline(msg)
    return at if at is not None and now > at else None


def describe(at: float, now: float) -> str:
    """Why a job was dropped, for the log and its task."""
    return f"not started before its expires_at ({now - at:.3f}s late); dropped, not run"


def hook(job_class: Any, msg: dict) -> None:
    """The class's ``on_expired(msg)`` (job.py), if it has one; the caller guards it."""
    fn = getattr(job_class, "on_expired", None)
    if fn is not None:
        fn(msg)
