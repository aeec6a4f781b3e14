"""``queuedctl``'s commands, and the table of them that ctl.py builds its parser from: each is a
``Command`` (name, help, how to add its arguments, what it does). This module has the numbers
and the queues (stats, queues, pause, unpause, clear, history); ctljobs.py the jobs (jobs,
retry, delete, kill); ctlprocs.py the processes (processes, running, quiet/stop/dump, ping)
and version.

Every command returns its exit status; what cannot go on raises ``Usage`` (exit 2, with the
usage line) or ``Unhealthy`` (exit 1, one line).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Callable

import redis as redis_lib

from ..suggest import did_you_mean
from .api import Admin
from .deadlimits import DeadLimits
from .names import name_of, to_key
from .snapshot import Gone, Snapshot
from . import ctlout as out


class Usage(Exception):
    """A command line that cannot be acted on: exit 2 with the usage line."""


class Unhealthy(Exception):
    """What was asked about is absent or unhealthy: exit 1 with this one line."""


class NeedYes(Exception):
    """A question that cannot be asked (stdin is not a terminal) and no --yes: exit 2 with
    this one line, nothing done."""


@dataclass
class Command:
    name: str
    summary: str
    run: Callable[["Context", argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None]
    epilog: str = ""
    description: str = ""
    tables: bool = False            # draws tables unless --json: needs rich
    aliases: tuple[str, ...] = ()
    check: Callable[[argparse.Namespace], None] = lambda args: None


class Context:
    """What a command works with: the Admin (its client connects at its first command, so
    ``version`` never touches Redis), the masked URL for messages, and one "now" for every
    time shown."""

    def __init__(self, client: redis_lib.Redis, namespace: str | None, where: str, source: str,
                 dead_limits: DeadLimits | None = None):
        self.client = client
        self.namespace = namespace
        self.dead_limits = dead_limits
        self.where = where + (f" (namespace {namespace})" if namespace else "")
        self.source = source
        self.now = time.time()
        self._admin: Admin | None = None

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.client, namespace=self.namespace,
                                dead_limits=self.dead_limits)
        return self._admin


def json_flag(p: argparse.ArgumentParser) -> None:
    """The output options, ``--json`` and ``--format``, on a command that prints a result
    (ctl.py puts them before the command too). SUPPRESS: an option not given after the
    command must not undo one given before it."""
    group = p.add_argument_group("output")
    group.add_argument("--json", dest="format", action="store_const", const="json",
                       default=argparse.SUPPRESS,
                       help="one JSON document on stdout (times in epoch seconds); the same "
                            "as --format json")
    group.add_argument("--format", choices=out.FORMATS, default=argparse.SUPPRESS,
                       help="table (rich, the default on a terminal), plain (one line per "
                            "row, nothing cut: the default off a terminal), tsv, json")


# --- stats, history ----------------------------------------------------------------------

def run_stats(ctx: Context, args) -> int:
    s = ctx.admin.stats()
    queues = ctx.admin.queue_summaries(ctx.now)
    c = ctx.admin.counters()
    doc = {"processed": s.processed, "failed": s.failed, "enqueued": s.enqueued,
           "scheduled": s.scheduled_size, "retries": s.retry_size, "dead": s.dead_size,
           "processes": s.processes_size, "busy": s.workers_size,
           "default_latency": s.default_queue_latency, **c,
           "queues": {q.name: {"size": q.size, "latency": q.latency, "paused": q.paused}
                      for q in queues},
           "time": ctx.now}
    if args.json:
        out.emit_json(doc)
        return 0
    out.print_pairs(f"queued on {ctx.where}", [
        ("Processed", out.count(s.processed)), ("Failed", out.count(s.failed)),
        ("Enqueued", out.count(s.enqueued)), ("Scheduled", out.count(s.scheduled_size)),
        ("Retries", out.count(s.retry_size)), ("Dead", out.count(s.dead_size)),
        ("Processes", out.count(s.processes_size)), ("Busy", out.count(s.workers_size)),
        ("Default latency", out.duration(s.default_queue_latency)),
        ("Expired", out.count(c["expired"])), ("Over limit", out.count(c["overlimit"])),
        ("Duplicates dropped", out.count(c["unique_dropped"])),
        ("Duplicates put off", out.count(c["unique_deferred"]))])
    if out.lines_only():
        out.say("")  # (the queues' header follows the numbers)
    _queue_table(queues)
    return 0


def run_history(ctx: Context, args) -> int:
    days = ctx.admin.history(args.days, start=ctx.now)
    if args.json:
        out.emit_json([{"date": d, "processed": p, "failed": f} for d, p, f in days])
        return 0
    out.print_table(f"Jobs per UTC day, last {args.days}", ["Date", "Processed", "Failed"],
                    [(d, out.count(p), out.count(f)) for d, p, f in days],
                    right=("Processed", "Failed"))
    return 0


def _history_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--days", type=positive, default=7, metavar="N",
                   help="days back from today (default 7)")
    json_flag(p)


# --- queues -------------------------------------------------------------------------------------

def _queue_table(queues) -> None:
    total = sum(q.size for q in queues)
    out.print_table("Queues", ["Queue", "Size", "Latency", "Paused"],
                    [(out.name(q.name), out.count(q.size), out.duration(q.latency),
                      "paused" if q.paused else "") for q in queues],
                    caption=f"{out.plural(len(queues), 'queue')}, {out.plural(total, 'job')}",
                    right=("Size", "Latency"))


def run_queues(ctx: Context, args) -> int:
    queues = ctx.admin.queue_summaries(ctx.now)
    if args.json:
        out.emit_json([q.as_dict() for q in queues])
    else:
        _queue_table(queues)
    return 0


def _queue_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("queue", metavar="QUEUE", type=queue_name,
                   help="the queue's name, or queue:NAME (queue: alone: the empty name)")
    json_flag(p)


def _pause_arguments(p: argparse.ArgumentParser) -> None:
    _queue_argument(p)
    p.add_argument("--force", action="store_true",
                   help="pause it even if no live process serves it or it does not exist "
                        "yet (exit 0)")


def run_pause(ctx: Context, args) -> int:
    """Pause, but a typo must not look like success (issue 20): a queue that does not exist
    is not paused (exit 1, with the near names); one no live process serves is paused with a
    warning and exit 1. --force: paused either way, exit 0."""
    known = _known_queues(ctx)
    served = {q for p in ctx.admin.processes() for q in p.queues}
    exists = args.queue in known | served or ctx.admin.queue(args.queue).size() > 0
    if not exists and not args.force:
        raise Unhealthy(f"no queue named {out.name(args.queue)}: it holds no jobs and no live "
                        f"process serves it; nothing paused"
                        f"{did_you_mean(args.queue, known | served)} (--force pauses it "
                        f"anyway)")
    status = _pause(ctx, args, True)
    if args.queue not in served and not args.force:
        out.warn(f"no live process serves queue {out.name(args.queue)} (queuedctl processes "
                 f"lists what each serves); it is paused for whoever starts serving it")
        return 1
    return status


def _known_queues(ctx: Context) -> set[str]:
    """Queues listed in ``queues`` and paused ones (a queue holding jobs that a producer
    never listed in ``queues``, PHP's LPUSH alone, is found by its length: run_pause)."""
    names = {name_of(n) for n in ctx.admin.r.sscan_iter(ctx.admin.keys.queues)}
    return names | set(ctx.admin.paused())


def run_unpause(ctx: Context, args) -> int:
    return _pause(ctx, args, False)


def _pause(ctx: Context, args, pause: bool) -> int:
    queue = ctx.admin.queue(args.queue)
    changed = queue.pause() if pause else queue.unpause()
    size = queue.size()
    if args.json:
        out.emit_json({"queue": args.queue, "paused": pause, "changed": changed,
                       "size": size})
    elif not changed:
        out.say(f"queue {out.name(args.queue)} was already "
                f"{'paused' if pause else 'not paused'}")
    elif pause:
        out.say(f"paused queue {out.name(args.queue)}: workers take no more jobs from it "
                f"({out.count(size)} waiting)")
    else:
        out.say(f"unpaused queue {out.name(args.queue)}: workers take jobs from it again "
                f"({out.count(size)} waiting)")
    return 0


def run_clear(ctx: Context, args) -> int:
    """Asked, it deletes at most the jobs it counted (a copy taken for the question; red team
    RT1, finding 7), and jobs pushed while the question was read stay; with --yes, every job
    of the queue in one step (Sidekiq's clear)."""
    queue = ctx.admin.queue(args.queue)
    shown = out.name(args.queue)
    known = queue.size() or ctx.admin.r.sismember(ctx.admin.keys.queues, to_key(args.queue))
    if not known:
        raise Unhealthy(f"no queue named {shown} (queuedctl queues lists them)")
    if args.yes:
        cleared = queue.clear()
    else:
        can_ask(args, f"clearing queue {shown}")
        with queue.snapshot() as snap:
            confirmed(args, f"Delete the {out.count(snap.count)} jobs of queue {shown}?",
                      f"clearing queue {shown}", snap)
            with out.Bar(f"clear {shown}", snap.count) as bar:
                cleared = queue.clear_counted(snap, progress=bar.callback)
    if args.json:
        out.emit_json({"queue": args.queue, "cleared": cleared})
    else:
        out.say(f"cleared queue {shown}: {out.plural(cleared, 'job')} deleted")
    return 0


def _clear_arguments(p: argparse.ArgumentParser) -> None:
    _queue_argument(p)
    yes_flag(p)


def yes_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-y", "--yes", action="store_true",
                   help="do not ask (needed when stdin is not a terminal)")


def can_ask(args, what: str) -> None:
    """Refuse now (before counting anything) when a question will be needed and cannot be
    asked: no --yes, and no terminal to ask on (cron, CI, a pipe), rather than wait for an
    answer that cannot come."""
    if not args.yes and not sys.stdin.isatty():
        raise NeedYes(f"{what} needs --yes when stdin is not a terminal (nothing was done)")


def confirmed(args, question: str, what: str, snap: Snapshot | None = None) -> None:
    """Go on only with --yes or a yes typed on the terminal; with ``snap``, the copy the
    question counted, only while it is there (an answer after its TTL did nothing and said
    "0 jobs deleted", exit 0: red team RT4, finding 2)."""
    if args.yes:
        return
    can_ask(args, what)
    if not out.confirm(question):
        raise Unhealthy("not confirmed; nothing was done")
    if snap is not None:
        try:
            snap.claim()
        except Gone as e:
            raise Unhealthy(f"nothing done: {e}; ask again") from None


# --- argument types ------------------------------------------------------------------------------

#: A queue on the command line: its name as it is (the shell's quotes keep blanks and
#: newlines: ``pause ' low'``, ``pause $'\\xff\\xfe'``), or ``queue:NAME`` as a SET is named;
#: ``queue:`` is the empty name, and a name that starts with ``queue:`` is given as
#: ``queue:queue:...``. A bare empty argument is refused: an unset shell variable
#: (``queuedctl clear "$Q"``) must not name the queue whose name is empty.
QUEUE_PREFIX = "queue:"


def queue_name(text: str) -> str:
    if text.startswith(QUEUE_PREFIX):
        return text[len(QUEUE_PREFIX):]
    if not text:
        raise argparse.ArgumentTypeError(
            "an empty argument is not a queue; the queue whose name is empty is "
            "queue: (nothing after the colon)")
    return text


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


# --- the table of commands ------------------------------------------------------------------------

COMMANDS = [
    Command("stats", "processed, failed, enqueued, scheduled, retries, dead, processes, "
            "busy; each queue's size and latency", run_stats, json_flag, tables=True,
            description="The numbers Sidekiq::Stats gives on the same Redis, and every "
            "queue's size, latency and pause; and queued's own counts: jobs dropped as "
            "expired, over-limit reschedules, duplicate unique jobs dropped at their push "
            "or put off as they started.",
            epilog="examples:\n  queuedctl stats\n  queuedctl stats --json | jq .dead"),
    Command("queues", "every queue: size, latency (the oldest job's wait), paused",
            run_queues, json_flag, tables=True,
            epilog="examples:\n  queuedctl queues\n  queuedctl queues --json"),
    Command("pause", "workers stop taking jobs from QUEUE (its jobs wait)", run_pause,
            _pause_arguments, description="Pause a queue: every queued worker stops "
            "taking jobs from it within one fetch round; its jobs stay and wait. Kept "
            "where Sidekiq Pro keeps it (the `paused` set). A queue that does not exist is "
            "not paused (exit 1); one no live process serves is paused with a warning "
            "(exit 1); --force pauses either, exit 0.",
            epilog="examples:\n  queuedctl pause reports && queuedctl queues\n"
                   "  queuedctl pause reports --force   # before its workers start"),
    Command("unpause", "workers take jobs from QUEUE again", run_unpause, _queue_argument,
            epilog="example:\n  queuedctl unpause reports"),
    Command("clear", "delete every job of QUEUE (asks first)", run_clear,
            _clear_arguments,
            description="Delete every job waiting in QUEUE, in one step, and the queue "
            "from the queue list. On a terminal it asks first; when stdin is not a "
            "terminal it needs --yes (else exit 2, nothing done).",
            epilog="examples:\n  queuedctl clear low\n  queuedctl clear low --yes   "
            "# from a script"),
    Command("history", "processed and failed per UTC day", run_history,
            _history_arguments, tables=True,
            epilog="example:\n  queuedctl history --days 30"),
]
