"""``queuedctl``'s task commands (seed 000): ``tasks`` lists the newest, ``task ID`` shows one
(its progress bar, counts per status, its failures with their errors and messages; ``--watch``
redraws it until the task completes), ``new-task`` makes an open task for a producer in another
language, and ``task ID --seal`` says its jobs are all in.

Everything is read through queued.Task, the same reads a Python producer makes (progress is
O(1): one pipeline of SCARDs); nothing here writes to a task but ``new-task`` and ``--seal``.
"""
from __future__ import annotations

import argparse
import time

from .. import client as client_mod
from ..task import Task, recent, state_word as state
from . import ctlout as out
from .ctlcmds import Command, Context, Unhealthy, json_flag, positive

#: Seconds between two redraws of ``task --watch``.
WATCH_EVERY = 0.5
#: States shown in the counts, in the order of a job's life.
SHOWN = ("enqueued", "working", "finished", "failed", "error")


def _client(ctx: Context) -> client_mod.Client:
    return client_mod.Client(ctx.client, namespace=ctx.namespace)


def _find(ctx: Context, task_id: str) -> Task:
    task = Task.find(task_id, _client(ctx))
    if task is None:
        raise Unhealthy(f"no task {task_id} on {ctx.where} (never made, or expired)")
    return task


def final(progress: dict) -> int:
    """Jobs in a final state: finished, failed, and the errors not waiting for a retry."""
    return progress["finished"] + progress["failed"] + progress["error"] - progress["retrying"]


def failures(task: Task, limit: int) -> list[dict]:
    """Up to ``limit`` records of failed jobs and errors (final or retrying)."""
    found: list[dict] = []
    for status in ("failed", "error"):
        for record in task.jobs(status, count=min(limit, 500)):
            if len(found) >= limit:
                return found
            found.append(record)
    return found


def document(task: Task, limit: int) -> dict:
    info, progress = task.info(), task.progress()
    return {**info, "state": state(info, progress), "progress": progress,
            "failures": failures(task, limit) if limit else []}


# --- task ID ------------------------------------------------------------------------------------

def run_task(ctx: Context, args) -> int:
    task = _find(ctx, args.task_id)
    if args.seal or args.total is not None:
        task.seal(total=args.total)
        if not args.json and not args.watch:
            out.say(f"sealed task {task.id}"
                    + (f" (total {args.total:,})" if args.total is not None else ""))
            return 0
    if args.watch:
        doc = _watch(task, args)
    else:
        doc = document(task, args.failures)
        if not args.json:
            _show(doc, ctx.now)
    if args.json:
        out.emit_json(doc)
    # --watch waits for the end: its status says how it ended (scripts: `task ID --watch`)
    return 1 if args.watch and not doc["progress"]["success"] else 0


def _watch(task: Task, args) -> dict:
    """Redraw until the task completes (a live bar on a terminal; otherwise nothing until
    the end); the last document."""
    live = None
    if not args.json:
        out.require_rich()
        from rich.live import Live
        live = Live(console=out.console(), auto_refresh=False, transient=False)
        live.start()
    try:
        while True:
            doc = document(task, 0)
            if live is not None:
                live.update(_render(doc, time.time(), []), refresh=True)
            if doc["progress"]["complete"]:
                break
            time.sleep(WATCH_EVERY)
        doc = document(task, args.failures)
        if live is not None:
            live.update(_render(doc, time.time(), doc["failures"]), refresh=True)
        return doc
    finally:
        if live is not None:
            live.stop()


def _show(doc: dict, now: float) -> None:
    out.console().print(_render(doc, now, doc["failures"]))


def _render(doc: dict, now: float, shown: list[dict]):
    """The task as one rich renderable: title, bar, counts, failures."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text
    p = doc["progress"]
    total = max(p["total"], doc["expected"] or 0)
    done = final(p)
    title = Text(f"task {doc['id']}  {doc['description']}".rstrip())
    line = Table.grid(padding=(0, 1))
    line.add_row(ProgressBar(total=max(total, 1), completed=done, width=30),
                 Text(f"{done:,}/{total:,} final  {_percent(done, total)}  {doc['state']}"
                      f"  (made {out.when(doc['created_at'], now)})"))
    counts = Table(show_header=True, title=None)
    for name in SHOWN:
        counts.add_column(name.capitalize(), justify="right")
    counts.add_column("Retrying", justify="right")
    counts.add_row(*(out.count(p[name]) for name in SHOWN), out.count(p["retrying"]))
    parts = [title, line, counts]
    if shown:
        parts.append(_failure_table(shown, p["failed"] + p["error"]))
    return Group(*parts)


def _percent(done: int, total: int) -> str:
    return f"{100 * done / total:.0f} %" if total else "-"


def _failure_table(records: list[dict], of: int):
    from rich.table import Table
    from rich.text import Text
    table = Table(title=f"Failures ({len(records):,} of {of:,})", title_justify="left")
    for name in ("JID", "Class", "Status", "Error", "Last message"):
        table.add_column(name, overflow="fold", no_wrap=name == "JID")
    for r in records:
        error = r["error"] or {}
        status = "error (retrying)" if r["retrying"] else r["status"]
        last = r["messages"][-1]["text"] if r["messages"] else ""
        table.add_row(*(Text(str(cell)) for cell in (
            r["jid"], r["class"] or "-", status,
            out.cut(f"{error.get('class', '')}: {error.get('message', '')}", 80),
            out.cut(last, 60))))
    return table


def _task_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task_id", metavar="ID", help="the task's id (queued.Task(...).id)")
    p.add_argument("--watch", action="store_true",
                   help="redraw until the task completes; exit 0 if every job finished, "
                        "1 if some failed or died")
    p.add_argument("--failures", type=int, default=10, metavar="N",
                   help="show up to N failed jobs and errors (default 10; 0: none)")
    p.add_argument("--seal", action="store_true",
                   help="every job is in: the task completes once they are all final")
    p.add_argument("--total", type=positive, metavar="N",
                   help="with --seal: the task will have N jobs (jobs pushed by another "
                        "language with only task_id are counted from their start)")
    json_flag(p)


# --- tasks --------------------------------------------------------------------------------------

def run_tasks(ctx: Context, args) -> int:
    rows = []
    for task in recent(_client(ctx), args.limit):
        info, progress = task.info(), task.progress()
        rows.append({**info, "state": state(info, progress), "progress": progress})
    if args.json:
        out.emit_json(rows)
        return 0
    out.print_table(
        "Tasks, newest first",
        ["ID", "Description", "Made", "Total", "Finished", "Failed", "Error", "Done", "State"],
        [(t["id"], out.cut(t["description"], 40), out.when(t["created_at"], ctx.now),
          out.count(t["progress"]["total"]), out.count(t["progress"]["finished"]),
          out.count(t["progress"]["failed"]), out.count(t["progress"]["error"]),
          _percent(final(t["progress"]), t["progress"]["total"]), t["state"])
         for t in rows],
        caption=out.plural(len(rows), "task"),
        right=("Total", "Finished", "Failed", "Error", "Done"))
    return 0


def _tasks_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=positive, default=20, metavar="N",
                   help="the newest N tasks (default 20)")
    json_flag(p)


# --- new-task -----------------------------------------------------------------------------------

def run_new_task(ctx: Context, args) -> int:
    task = Task(args.description, on_complete=args.on_complete, on_success=args.on_success,
                callback_queue=args.callback_queue, client=_client(ctx)).create()
    if args.json:
        out.emit_json(task.info())
    else:
        out.say(task.id)
    return 0


def _new_task_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("description", help="what the task is, as people read it")
    p.add_argument("--on-complete", metavar="CLASS",
                   help="job class run once when every job is final, with (task_id, summary)")
    p.add_argument("--on-success", metavar="CLASS",
                   help="job class run once when every job finished")
    p.add_argument("--callback-queue", metavar="QUEUE",
                   help="queue of the callbacks (default: the callback class's, else default)")
    json_flag(p)


COMMANDS = [
    Command("tasks", "the newest tasks: progress and state", run_tasks, _tasks_arguments,
            tables=True, epilog="examples:\n  queuedctl tasks\n  queuedctl tasks --json"),
    Command("task", "one task: progress bar, counts per status, failures (--watch: live)",
            run_task, _task_arguments, tables=True,
            description="One task (queued.Task): a bar of its jobs in a final state, counts "
            "per status, and its failed jobs and errors with their last message. --watch "
            "redraws it until the task completes. --seal says every job is in.",
            epilog="examples:\n  queuedctl task 5f0c...e1 --watch\n"
                   "  queuedctl task 5f0c...e1 --json | jq .progress\n"
                   "  queuedctl task 5f0c...e1 --seal --total 200"),
    Command("new-task", "make an open task for jobs pushed from another language; prints "
            "its id", run_new_task, _new_task_arguments,
            description="Make an empty, open task. Jobs join it by the payload field "
            "task_id (docs/tasks.md); seal it with `queuedctl task ID --seal --total N` "
            "once they are all pushed.",
            epilog="example:\n  TID=$(queuedctl new-task 'import 42' --on-complete "
                   "ImportDone)"),
]
