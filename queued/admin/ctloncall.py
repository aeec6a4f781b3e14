"""``queuedctl``'s on-call commands (issue 20, DESIGN.md "On-call commands"): ``errors`` (what is
failing: the retry or dead set grouped by class and error class, largest first) and ``find
JID`` (where a job is now). The reading is in errors.py and find.py, which the dashboard
shares; here only the command line and how the answers show.
"""
from __future__ import annotations

import argparse

from . import ctlout as out
from .ctlcmds import Command, Context, Unhealthy, Usage, json_flag
from .entries import Entry
from .errors import error_groups
from .find import Place, locate

ERROR_SETS = {"retry": "retry", "retries": "retry", "dead": "dead", "morgue": "dead"}


# --- errors ---------------------------------------------------------------------------------------

def _errors_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("set", metavar="SET", type=_error_set, help="retry or dead")
    json_flag(p)


def _error_set(text: str) -> str:
    if text in ERROR_SETS:
        return ERROR_SETS[text]
    raise argparse.ArgumentTypeError(f"{text!r} is not a set of failed jobs: give retry or dead")


def run_errors(ctx: Context, args) -> int:
    jobset = ctx.admin.jobset(args.set)
    size = jobset.size()
    with out.Bar(f"reading {args.set}", size, acted=False) as bar:
        draw = bar.callback
        groups = error_groups(jobset, progress=(lambda n: draw(n, 0)) if draw else None)
    if args.json:
        out.emit_json([g.as_dict() for g in groups])
        return 0
    total = sum(g.count for g in groups)
    out.print_table(
        f"Errors in {args.set}, the largest groups first",
        ["Count", "Class", "Error", "Latest message", "Latest"],
        [(out.count(g.count), out.name(g.klass), out.name(g.error_class) if g.error_class
          else "-", out.cut(g.latest_message, 70), out.when(g.latest_at, ctx.now))
         for g in groups],
        caption=f"{out.plural(len(groups), 'group')}, {out.plural(total, 'job')} in {args.set}",
        right=("Count",))
    return 0


# --- find -----------------------------------------------------------------------------------------

def _find_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("jid", metavar="JID", help="the job's jid")
    p.add_argument("--backtrace", action="store_true",
                   help="also print the backtrace its last error left (error_backtrace)")
    json_flag(p)


def _check_find(args) -> None:
    if not args.jid:
        raise Usage("a jid cannot be empty")


def run_find(ctx: Context, args) -> int:
    places = locate(ctx.admin, args.jid, ctx.now)
    if args.json:
        docs = [p.as_dict() for p in places]
        if args.backtrace:
            for doc, p in zip(docs, places):
                if p.entry is not None:
                    doc["backtrace"] = p.entry.backtrace
        out.emit_json({"jid": args.jid, "found": bool(places), "places": docs})
    elif places:
        out.print_table(f"job {out.name(args.jid)}", ["Where", "When", "Class", "Queue",
                                                       "Detail"],
                        [_row(p, ctx.now) for p in places])
        if args.backtrace:
            _backtraces(places)
    if not places:
        raise Unhealthy(f"no job {out.name(args.jid)} on {ctx.where}: not in a queue, the "
                        f"schedule, "
                        f"the retry or dead set, running, fetched, nor in a task")
    return 0


def _row(p: Place, now: float) -> tuple[str, str, str, str, str]:
    """(where, when, class, queue, what that place says)."""
    e = p.entry
    klass = out.name(e.klass if e is not None else str((p.record or {}).get("class") or "-"))
    when, queue = out.when(p.at, now), out.name(p.queue or "")
    if p.where == "queue":
        return ("queue", f"enqueued {when}", klass, queue,
                f"position {out.count(p.position or 0)} of {out.count(p.length or 0)} "
                f"(1 runs next)")
    if p.where == "schedule":
        return ("scheduled", f"runs {when}", klass, queue, _args(e))
    if p.where in ("retry", "dead"):
        verb = "retries" if p.where == "retry" else "died"
        return (p.where, f"{verb} {when}", klass, queue, _failure(e))
    if p.where == "running":
        return ("running", f"started {when}", klass, queue,
                f"on {out.name(p.identity)} pid {p.pid if p.pid is not None else '-'} "
                f"worker {p.worker}")
    if p.where == "reserved":
        return ("fetched", "-", klass, queue,
                f"held by {out.name(p.identity)} worker {p.worker} (in its batch, or its end "
                f"not written yet)")
    return ("task", "-", klass, out.name(str((p.record or {}).get("queue") or "-")), _task(p))


def _args(e: Entry | None) -> str:
    return "args " + out.compact(e.args, 60) if e is not None else ""


def _failure(e: Entry | None) -> str:
    if e is None:
        return ""
    count = e.retry_count
    error = f"{e.error_class}: {e.error_message}" if e.error_class else e.error_message
    text = out.cut(error, 80)
    return text + (f" (retry_count {count})" if count is not None else "")


def _task(p: Place) -> str:
    record = p.record or {}
    status = "error (retrying)" if record.get("retrying") else str(record.get("status"))
    error = record.get("error") or {}
    said = f": {out.cut(error.get('class', '') + ': ' + error.get('message', ''), 60)}" \
        if error else ""
    name = f" ({out.cut(p.task_description, 40)})" if p.task_description else ""
    return f"task {out.name(p.task_id)}{name}: {status}{said}"


def _backtraces(places: list[Place]) -> None:
    shown = [(p, p.entry.backtrace) for p in places if p.entry is not None]
    shown = [(p, lines) for p, lines in shown if lines]
    if not shown:
        out.warn("no backtrace stored with this job (its error has none, or "
                 "backtrace: false)")
    for p, lines in shown:
        out.say(f"backtrace ({p.where}), innermost first:")
        for line in lines:
            out.say(f"  {line}")


COMMANDS = [
    Command("errors", "what is failing: retry or dead grouped by class and error, largest "
            "first", run_errors, _errors_arguments, tables=True,
            description="The jobs of retry or dead grouped by (class, error class), each "
            "group with its count and its latest message and time, the largest first: "
            "what is failing, at a glance. ActiveJob jobs count under their own class.",
            epilog="examples:\n  queuedctl errors dead\n  queuedctl errors retry --json\n"
                   "then, for one group: queuedctl jobs dead --class CLASS --error-class "
                   "ERROR (retry, delete, kill: the same filters, with --all)"),
    Command("find", "where a job is now: queue, schedule, retry, dead, running, its task",
            run_find, _find_arguments, tables=True, check=_check_find,
            description="Look for JID everywhere: the queues (its position), the schedule, "
            "the retry and dead sets, the running jobs (process, pid, worker), the jobs "
            "workers have fetched, and the tasks. Exit 0 when found, 1 when nowhere.",
            epilog="examples:\n  queuedctl find 0123456789abcdef01234567\n"
                   "  queuedctl find 0123456789abcdef01234567 --backtrace\n"
                   "  queuedctl find 0123456789abcdef01234567 --json | jq '.places[].where'"),
]
