"""``queuedctl``'s commands, and the table of them that ctl.py builds its parser from: each is a
``Command`` (name, help, how to add its arguments, what it does). This module has the numbers
and the jobs (stats, queues, pause, clear, jobs, retry/delete/kill, history); ctlprocs.py the
processes (processes, running, quiet/stop/dump, ping) and version.

Every command returns its exit status; what cannot go on raises ``Usage`` (exit 2, with the
usage line) or ``Unhealthy`` (exit 1, one line).
"""
from __future__ import annotations

import argparse
import heapq
import sys
import time
from dataclasses import dataclass
from typing import Callable

import redis as redis_lib

from .api import Admin, Entry, Filter, JobSet, Queue
from . import ctlout as out


class Usage(Exception):
    """A command line that cannot be acted on: exit 2 with the usage line."""


class Unhealthy(Exception):
    """What was asked about is absent or unhealthy: exit 1 with this one line."""


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
    """What a command works with: the Admin (connected on first use, so ``version`` never
    needs Redis), the masked URL for messages, and one "now" for every time shown."""

    def __init__(self, client: redis_lib.Redis, namespace: str | None, where: str, source: str):
        self.client = client
        self.namespace = namespace
        self.where = where + (f" (namespace {namespace})" if namespace else "")
        self.source = source
        self.now = time.time()
        self._admin: Admin | None = None

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.client, namespace=self.namespace)
        return self._admin


def require_rich() -> None:
    out._rich()


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="print one JSON document on stdout instead of tables (times in epoch "
                        "seconds)")


def _no_arguments(p: argparse.ArgumentParser) -> None:
    pass


# --- stats, history ----------------------------------------------------------------------

def run_stats(ctx: Context, args) -> int:
    s = ctx.admin.stats()
    queues = ctx.admin.queue_summaries(ctx.now)
    doc = {"processed": s.processed, "failed": s.failed, "enqueued": s.enqueued,
           "scheduled": s.scheduled_size, "retries": s.retry_size, "dead": s.dead_size,
           "processes": s.processes_size, "busy": s.workers_size,
           "default_latency": s.default_queue_latency,
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
        ("Default latency", out.duration(s.default_queue_latency))])
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
    p.add_argument("--days", type=_positive, default=7, metavar="N",
                   help="days back from today (default 7)")
    _json_flag(p)


# --- queues -------------------------------------------------------------------------------------

def _queue_table(queues) -> None:
    total = sum(q.size for q in queues)
    out.print_table("Queues", ["Queue", "Size", "Latency", "Paused"],
                    [(q.name, out.count(q.size), out.duration(q.latency),
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
    p.add_argument("queue", metavar="QUEUE", type=_queue_name, help="the queue's name")
    _json_flag(p)


def run_pause(ctx: Context, args) -> int:
    return _pause(ctx, args, True)


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
        out.say(f"queue {args.queue} was already {'paused' if pause else 'not paused'}")
    elif pause:
        out.say(f"paused queue {args.queue}: workers take no more jobs from it "
                f"({out.count(size)} waiting)")
    else:
        out.say(f"unpaused queue {args.queue}: workers take jobs from it again "
                f"({out.count(size)} waiting)")
    return 0


def run_clear(ctx: Context, args) -> int:
    queue = ctx.admin.queue(args.queue)
    size = queue.size()
    known = size or ctx.admin.r.sismember(ctx.admin.keys.queues, args.queue)
    if not known:
        raise Unhealthy(f"no queue named {args.queue} (queuedctl queues lists them)")
    confirmed(args, f"Delete the {out.count(size)} jobs of queue {args.queue}?",
              f"clearing queue {args.queue}")
    cleared = queue.clear()
    if args.json:
        out.emit_json({"queue": args.queue, "cleared": cleared})
    else:
        out.say(f"cleared queue {args.queue}: {out.plural(cleared, 'job')} deleted")
    return 0


def _clear_arguments(p: argparse.ArgumentParser) -> None:
    _queue_argument(p)
    _yes_flag(p)


def _yes_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-y", "--yes", action="store_true",
                   help="do not ask (needed when stdin is not a terminal)")


def confirmed(args, question: str, what: str) -> None:
    """Go on only with --yes or a yes typed on the terminal. Without a terminal to ask on
    (cron, CI, a pipe) it refuses rather than wait for an answer that cannot come."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise Usage(f"{what} needs --yes when stdin is not a terminal (nothing was done)")
    if not out.confirm(question):
        raise Unhealthy("not confirmed; nothing was done")


# --- the jobs: jobs, retry, delete, kill ------------------------------------------------------

SETS = {"scheduled": "scheduled", "schedule": "scheduled", "retry": "retry",
        "retries": "retry", "dead": "dead", "morgue": "dead"}


def _set_name(text: str) -> str:
    if text.startswith("queue:") and len(text) > len("queue:"):
        return text
    if text in SETS:
        return SETS[text]
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a set: give queue:NAME, scheduled, retry or dead")


def _queue_name(text: str) -> str:
    if not text or text.strip() != text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a queue name")
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _limit(text: str) -> int:
    return 0 if text == "0" else _positive(text)


def _source(ctx: Context, name: str) -> JobSet | Queue:
    if name.startswith("queue:"):
        return ctx.admin.queue(name[len("queue:"):])
    return ctx.admin.jobset(name)


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("set", metavar="SET", type=_set_name,
                   help="queue:NAME, scheduled, retry or dead")
    group = p.add_argument_group("filters (every one given must hold)")
    group.add_argument("--class", dest="klass", metavar="CLASS",
                       help="the job's class, exactly (ActiveJob's wrapped class too)")
    group.add_argument("--queue", metavar="QUEUE", help="the job's queue, exactly")
    group.add_argument("--error", metavar="TEXT",
                       help="text in the error class or message, any case")
    group.add_argument("--arg", metavar="TEXT", help="text in the arguments (as JSON)")


def _where(args, jids=None) -> Filter:
    return Filter.of(klass=args.klass, queue=args.queue, error=args.error, arg=args.arg,
                     jids=jids)


def _jobs_arguments(p: argparse.ArgumentParser) -> None:
    _filters(p)
    p.add_argument("--jid", metavar="JID", action="append", help="this job (repeatable)")
    p.add_argument("--limit", type=_limit, default=25, metavar="N",
                   help="show at most N jobs (default 25; 0 for all)")
    _json_flag(p)


def run_jobs(ctx: Context, args) -> int:
    source = _source(ctx, args.set)
    shown, matched, size = _pick(source, _where(args, args.jid), args.limit)
    if args.json:
        out.emit_json({"set": args.set, "size": size, "matched": matched,
                       "jobs": [e.as_dict() for e in shown]})
        return 0
    columns, row = _layout(source, ctx.now)
    caption = f"{out.count(len(shown))} of {out.count(matched)}" + (
        f" matching, {out.count(size)} in {args.set}" if matched != size else f" in {args.set}")
    if len(shown) < matched:
        caption += " (--limit N shows more, 0 all)"
    out.print_table(args.set, columns, (row(i, e) for i, e in enumerate(shown)), caption)
    return 0


def _pick(source: JobSet | Queue, where: Filter, limit: int) -> tuple[list[Entry], int, int]:
    """(jobs to show, how many match, how many there are): the next to run first (the
    latest death first for dead), as many as ``limit`` (0: all). Without a filter a page is
    read; with one every job is examined once and only the shown ones are kept."""
    size = source.size()
    if not where:
        return source.page(0, limit or max(size, 1)), size, size
    matched = 0

    def counted():
        nonlocal matched
        for entry in source.scan(where):
            matched += 1
            yield entry

    if isinstance(source, Queue):  # scanned in run order already
        shown = [e for i, e in enumerate(counted()) if not limit or i < limit]
    else:
        order = (lambda e: -e.score) if source.name == "dead" else (lambda e: e.score)
        everything = counted()
        shown = heapq.nsmallest(limit, everything, key=order) if limit else \
            sorted(everything, key=order)
    return shown, matched, size


def _error(e: Entry) -> str:
    text = f"{e.error_class}: {e.error_message}" if e.error_class else e.error_message
    return out.cut(text, 60)


def _layout(source: JobSet | Queue, now: float):
    """(columns, row(index, entry)) for the table of this kind of set."""
    def args_of(e):
        return out.compact(e.args, 50)

    if isinstance(source, Queue):
        return (["#", "JID", "Class", "Args", "Enqueued"],
                lambda i, e: (i + 1, e.jid, e.klass, args_of(e), out.when(e.enqueued_at, now)))
    if source.name == "schedule":
        return (["Runs", "JID", "Class", "Queue", "Args"],
                lambda i, e: (out.when(e.score, now), e.jid, e.klass, e.queue, args_of(e)))
    if source.name == "retry":
        return (["Next retry", "JID", "Class", "Queue", "Args", "Retries", "Error"],
                lambda i, e: (out.when(e.score, now), e.jid, e.klass, e.queue, args_of(e),
                              "-" if e.retry_count is None else e.retry_count, _error(e)))
    return (["Died", "JID", "Class", "Queue", "Args", "Error"],
            lambda i, e: (out.when(e.score, now), e.jid, e.klass, e.queue, args_of(e),
                          _error(e)))


def _action_arguments(p: argparse.ArgumentParser) -> None:
    _filters(p)
    p.add_argument("--all", action="store_true",
                   help="every job of SET that matches the filters")
    p.add_argument("jids", metavar="JID", nargs="*", default=[],
                   help="these jobs (a jid not found is exit 1; the others are acted on)")
    _yes_flag(p)
    _json_flag(p)


DONE_WORDS = {"retry": "retried (enqueued now)", "delete": "deleted",
              "kill": "killed (moved to dead)"}


def _check_action(action: str):
    def check(args) -> None:
        if not args.all and not args.jids:
            raise Usage("give the jobs' JIDs, or --all (with filters: every match)")
        if args.all and args.jids:
            raise Usage("give the jobs' JIDs or --all, not both")
        if action != "delete" and args.set.startswith("queue:"):
            raise Usage(f"{action}: a queue's jobs are waiting to run already; "
                        f"{action} works on scheduled, retry and dead")
        if action == "kill" and args.set == "dead":
            raise Usage("kill: dead jobs are dead already")
    return check


def _run_action(action: str):
    def run(ctx: Context, args) -> int:
        source = _source(ctx, args.set)
        if args.all:
            done, missing = _act_on_all(source, action, args), []
        else:
            done, missing = _act_on_jids(source, action, args)
        if args.json:
            out.emit_json({"action": action, "set": args.set, "done": done,
                           "not_found": missing})
        else:
            out.say(f"{out.plural(done, 'job')} {DONE_WORDS[action]} from {args.set}")
        if missing:
            narrowed = " (or not matching the filters)" if _where(args) else ""
            out.warn(f"not found in {args.set}{narrowed}: {', '.join(missing)}")
            return 1
        return 0
    return run


def _act_on_all(source: JobSet | Queue, action: str, args) -> int:
    where = _where(args)
    size = source.size()
    if action == "delete" and not where:
        # No filter: the whole set or queue goes at once, like clear.
        confirmed(args, f"Delete all {out.count(size)} jobs of {args.set}?",
                  f"deleting every job of {args.set}")
    act = {"retry": getattr(source, "retry_all", None),
           "delete": source.delete_all, "kill": getattr(source, "kill_all", None)}[action]
    with out.Bar(f"{action} {args.set}", size) as bar:
        return act(where, progress=bar.callback)


def _act_on_jids(source: JobSet | Queue, action: str, args) -> tuple[int, list[str]]:
    """Act on the named jobs (that match the filters); (how many, the jids not acted on).
    One walk finds them all; each is then acted on by itself, guarded: one taken meanwhile
    counts as not found."""
    jids = list(dict.fromkeys(args.jids))
    acted: set[str] = set()
    done = 0
    for entry in list(source.scan(_where(args, jids))):
        if getattr(source, action)(entry):
            done += 1
            acted.add(entry.jid)
    return done, [j for j in jids if j not in acted]


# --- the table of commands ------------------------------------------------------------------------

COMMANDS = [
    Command("stats", "processed, failed, enqueued, scheduled, retries, dead, processes, "
            "busy; each queue's size and latency", run_stats, _json_flag, tables=True,
            description="The numbers Sidekiq::Stats gives on the same Redis, and every "
            "queue's size, latency and pause.",
            epilog="examples:\n  queuedctl stats\n  queuedctl stats --json | jq .dead"),
    Command("queues", "every queue: size, latency (the oldest job's wait), paused",
            run_queues, _json_flag, tables=True,
            epilog="examples:\n  queuedctl queues\n  queuedctl queues --json"),
    Command("pause", "workers stop taking jobs from QUEUE (its jobs wait)", run_pause,
            _queue_argument, description="Pause a queue: every queued worker stops "
            "taking jobs from it within one fetch round; its jobs stay and wait. Kept "
            "where Sidekiq Pro keeps it (the `paused` set).",
            epilog="example:\n  queuedctl pause reports && queuedctl queues"),
    Command("unpause", "workers take jobs from QUEUE again", run_unpause, _queue_argument,
            epilog="example:\n  queuedctl unpause reports"),
    Command("clear", "delete every job of QUEUE (asks first)", run_clear,
            _clear_arguments,
            description="Delete every job waiting in QUEUE, in one step, and the queue "
            "from the queue list. On a terminal it asks first; when stdin is not a "
            "terminal it needs --yes (else exit 2, nothing done).",
            epilog="examples:\n  queuedctl clear low\n  queuedctl clear low --yes   "
            "# from a script"),
    Command("jobs", "list the jobs of a queue or set, filtered (the peek)", run_jobs,
            _jobs_arguments, tables=True,
            description="List jobs of SET: queue:NAME (the next to run first), "
            "scheduled, retry (the next due first) or dead (the latest death first).",
            epilog="examples:\n  queuedctl jobs dead\n"
            "  queuedctl jobs retry --class Billing::InvoiceJob --error timeout\n"
            "  queuedctl jobs queue:default --arg 42 --limit 0 --json"),
    Command("retry", "enqueue jobs of a set now (on dead: Beanstalkd's kick)",
            _run_action("retry"), _action_arguments, check=_check_action("retry"),
            description="Push jobs of scheduled, retry or dead onto their queues now. "
            "Filters apply first; --all acts on every match. Each job is moved "
            "atomically and only if it is still there, so nothing runs twice when a "
            "worker, the scheduler or another queuedctl acts on the same jobs.",
            epilog="examples:\n  queuedctl retry dead 0123456789abcdef01234567\n"
            "  queuedctl retry dead --class Billing::InvoiceJob --error Timeout --all\n"
            "  queuedctl retry retry --all"),
    Command("delete", "delete jobs of a queue or set", _run_action("delete"),
            _action_arguments, check=_check_action("delete"),
            description="Delete jobs of queue:NAME, scheduled, retry or dead. --all with "
            "no filter deletes the whole set and asks first (--yes when stdin is not a "
            "terminal).",
            epilog="examples:\n  queuedctl delete retry 0123456789abcdef01234567\n"
            "  queuedctl delete dead --arg tenant-7 --all\n"
            "  queuedctl delete dead --all --yes"),
    Command("kill", "move jobs of scheduled or retry to dead", _run_action("kill"),
            _action_arguments, check=_check_action("kill"),
            epilog="examples:\n  queuedctl kill retry --class FlakyJob --all"),
    Command("history", "processed and failed per UTC day", run_history,
            _history_arguments, tables=True,
            epilog="example:\n  queuedctl history --days 30"),
]
