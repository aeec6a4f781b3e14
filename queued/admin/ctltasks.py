"""``queuedctl``'s task commands (seed 000): ``tasks`` lists the newest, ``task ID`` shows one
(its progress bar, counts per status, its failures with their errors and messages; ``--watch``
follows it until it completes: live on a terminal, progress lines with pace, ETA and the next
retry off one), ``new-task`` makes an open task for a producer in another
language, and ``task ID --seal`` says its jobs are all in.

Everything is read through queued.Task, the same reads a Python producer makes (progress is
O(1): one pipeline of SCARDs); nothing here writes to a task but ``new-task`` and ``--seal``.
"""
from __future__ import annotations

import argparse
import sys
import time

from .. import client as client_mod
from ..task import Task, state_word as state
from . import ctlout as out, ctltext
from .names import ExactKeys, name_of
from .tasksummary import Pace, next_retry, summary
from .ctlcmds import Command, Context, Unhealthy, json_flag, positive

#: Seconds between two reads of a watched task (its progress is O(1): a pipeline of SCARDs).
WATCH_EVERY = 0.5
#: Seconds between two progress lines of ``task --watch`` off a terminal (``--every``).
LINE_EVERY = 5.0
#: The counts shown, in the order of a job's life (tasksummary.py: they add up to the total).
SHOWN = ("enqueued", "working", "finished", "failed", "retrying", "error")


def _client(ctx: Context) -> client_mod.Client:
    """A client whose task keys are bytes (names.ExactKeys): a task id that is not UTF-8 (a
    producer in another language made it) reads its own keys."""
    client = client_mod.Client(ctx.client, namespace=ctx.namespace)
    client.keys = ExactKeys(ctx.namespace)
    return client


def _find(ctx: Context, task_id: str) -> Task:
    task = Task.find(task_id, _client(ctx))
    if task is None:
        raise Unhealthy(f"no task {out.name(task_id)} on {ctx.where} (never made, or expired)")
    return task


def _gone(task: Task) -> bool:
    """The task was deleted (the dashboard's Delete) or expired since it was found."""
    return not task.client.redis.exists(task.keys.task(task.id))


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
    """``task --json``: Task.info(), its state, Task.progress() (queued.Task's own counts,
    ``error`` counting the retrying ones), the summary every tool shows, its failures."""
    info, progress = task.info(), task.progress()
    return {**info, "state": state(info, progress), "progress": progress,
            "summary": summary(task, info, progress),
            "failures": failures(task, limit) if limit else []}


# --- task ID ------------------------------------------------------------------------------------

def run_task(ctx: Context, args) -> int:
    task = _find(ctx, args.task_id)
    if args.seal or args.total is not None:
        task.seal(total=args.total)
        if not args.json and not args.watch:
            out.say(f"sealed task {out.name(task.id)}"
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


class _Watch:
    """What a watch knows between two reads: the pace, the next retry (looked up at most
    every ``every`` seconds, and only while errors wait for one), the last line's time and
    state."""

    def __init__(self, task: Task, every: float):
        self.task, self.every = task, every
        self.pace = Pace()
        self.retry_at: float | None = None
        self.retry_read = self.line_at = float("-inf")
        self.state: str | None = None

    def read(self) -> dict:
        """The task now; Unhealthy once it is gone (red team RT1, finding 4: a deleted task
        read as an open one of 0 jobs, and the watch never ended)."""
        if _gone(self.task):
            raise Unhealthy(f"task {out.name(self.task.id)} is gone (deleted, or expired) "
                            f"while it was watched")
        doc = document(self.task, 0)
        s, now = doc["summary"], time.monotonic()
        self.pace.add(s["final"], now)
        if not s["retrying"]:
            self.retry_at = None
        elif now - self.retry_read >= self.every:
            self.retry_at, self.retry_read = next_retry(self.task), now
        return doc

    def line_due(self, s: dict) -> bool:
        """A progress line every ``every`` seconds, at each change of state, and at the end."""
        now = time.monotonic()
        if s["state"] != self.state or now - self.line_at >= self.every or s["complete"]:
            self.state, self.line_at = s["state"], now
            return True
        return False

    def pace_text(self, s: dict, now: float) -> str:
        rate = self.pace.rate()
        eta = self.pace.eta(s["total"] - s["final"])
        if eta is not None and self.retry_at is not None:
            eta = max(eta, self.retry_at - now)  # (not done before that retry has run)
        text = "rate -" if rate is None else f"{rate:.1f} jobs/s"
        if not s["complete"]:
            text += f", ETA {out.duration(eta) if eta is not None else '-'}"
        if self.retry_at is not None:
            text += f"; next retry {out.when(self.retry_at, now)} ({out.utc(self.retry_at)})"
        return text


def progress_line(s: dict, pace: str, now: float) -> str:
    """One line of ``task --watch`` off a terminal (for a deploy script's log)."""
    counts = ", ".join(f"{s[name]:,} {name}" for name in SHOWN)
    return (f"{time.strftime('%H:%M:%SZ', time.gmtime(now))} {s['state']}: "
            f"{s['final']:,}/{s['total']:,} final ({s['percent']} %): {counts}; {pace}")


def _watch(task: Task, args) -> dict:
    """Until the task completes: a live view on a terminal; off one, a progress line every
    --every seconds and at each change of state (on stderr with --json, whose stdout is the
    one document); the last document."""
    watch = _Watch(task, args.every)
    live = None
    if out.OUTPUT.format == "table":
        out.require_rich()
        from rich.live import Live
        live = Live(console=out.console(), auto_refresh=False, transient=False)
        live.start()
    say = out.say if not args.json else (lambda text: out.say(text, stream=sys.stderr))
    try:
        while True:
            doc = watch.read()
            s, now = doc["summary"], time.time()
            if live is not None:
                live.update(_render(doc, now, [], watch.pace_text(s, now)), refresh=True)
            elif watch.line_due(s):
                say(progress_line(s, watch.pace_text(s, now), now))
            if s["complete"]:
                break
            time.sleep(WATCH_EVERY)
        doc = document(task, args.failures)
        if live is not None:
            live.update(_render(doc, time.time(), doc["failures"]), refresh=True)
        elif not args.json:
            _show(doc, time.time())
        return doc
    finally:
        if live is not None:
            live.stop()


def _show(doc: dict, now: float) -> None:
    if not out.lines_only():
        out.console().print(_render(doc, now, doc["failures"]))
        return
    s = doc["summary"]
    out.print_pairs(f"task {out.name(doc['id'])}", [
        ("task", out.name(doc["id"])), ("description", doc["description"] or "-"),
        ("state", s["state"]),
        ("progress", f"{out.count(s['final'])}/{out.count(s['total'])} final "
                     f"({s['percent']} %)"),
        *((name, out.count(s[name])) for name in SHOWN),
        ("made", out.when(doc["created_at"], now)),
        ("completed", out.when(doc["completed_at"], now))])
    if doc["failures"]:
        out.say("")
        _failure_table(doc["failures"], s["failed"] + s["error"] + s["retrying"])


def _render(doc: dict, now: float, shown: list[dict], pace: str = ""):
    """The task as one rich renderable: title, bar, counts, failures."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text
    s = doc["summary"]
    title = Text(ctltext.visible(f"task {out.name(doc['id'])}  {doc['description']}")
                 .rstrip())
    line = Table.grid(padding=(0, 1))
    line.add_row(ProgressBar(total=max(s["total"], 1), completed=s["final"], width=30),
                 Text(f"{s['final']:,}/{s['total']:,} final  {s['percent']} %  {s['state']}"
                      f"  (made {out.when(doc['created_at'], now)})"))
    counts = Table(show_header=True, title=None)
    for name in SHOWN:
        counts.add_column(name.capitalize(), justify="right")
    counts.add_row(*(out.count(s[name]) for name in SHOWN))
    parts = [title, line, counts]
    if pace:
        parts.append(Text(pace))
    if shown:
        parts.append(_failure_table(shown, s["failed"] + s["error"] + s["retrying"],
                                    renderable=True))
    return Group(*parts)


def _failure_table(records: list[dict], of: int, renderable: bool = False):
    """The failures: a rich table to place in a view (``renderable``), else printed."""
    rows = []
    for r in records:
        error = r["error"] or {}
        status = "error (retrying)" if r["retrying"] else r["status"]
        last = r["messages"][-1]["text"] if r["messages"] else ""
        rows.append((out.name(r["jid"]), out.name(r["class"] or "-"), status,
                     out.cut(f"{error.get('class', '')}: {error.get('message', '')}", 80),
                     out.cut(last, 60)))
    columns = ["JID", "Class", "Status", "Error", "Last message"]
    title = f"Failures ({len(records):,} of {of:,})"
    if not renderable:
        out.print_table(title, columns, rows)
        return None
    from rich.table import Table
    from rich.text import Text
    table = Table(title=title, title_justify="left")
    for name in columns:
        table.add_column(name, overflow="fold", no_wrap=name == "JID")
    for row in rows:
        table.add_row(*(Text(ctltext.one_line(cell)) for cell in row))
    return table


def _task_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task_id", metavar="ID", help="the task's id (queued.Task(...).id)")
    p.add_argument("--watch", action="store_true",
                   help="follow it until it completes (a live view on a terminal, else a "
                        "progress line every --every seconds and at each change of state); "
                        "exit 0 if every job finished, 1 if some failed or died")
    p.add_argument("--every", type=_seconds, default=LINE_EVERY, metavar="SECONDS",
                   help=f"--watch off a terminal: seconds between two progress lines "
                        f"(default {LINE_EVERY:g})")
    p.add_argument("--failures", type=int, default=10, metavar="N",
                   help="show up to N failed jobs and errors (default 10; 0: none)")
    p.add_argument("--seal", action="store_true",
                   help="every job is in: the task completes once they are all final")
    p.add_argument("--total", type=positive, metavar="N",
                   help="with --seal: the task will have N jobs (jobs pushed by another "
                        "language with only task_id are counted from their start)")
    json_flag(p)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


# --- tasks --------------------------------------------------------------------------------------

def _recent(ctx: Context, limit: int) -> list[Task]:
    """The newest tasks of the index (queued.task.recent, with ids that are not UTF-8)."""
    client = _client(ctx)
    ids = client.redis.zrevrange(client.keys.tasks, 0, limit - 1)
    return [t for t in (Task.find(name_of(i), client) for i in ids) if t is not None]


def run_tasks(ctx: Context, args) -> int:
    rows = []
    for task in _recent(ctx, args.limit):
        info, progress = task.info(), task.progress()
        rows.append({**info, "state": state(info, progress), "progress": progress,
                     "summary": summary(task, info, progress)})
    if args.json:
        out.emit_json(rows)
        return 0
    out.print_table(
        "Tasks, newest first",
        ["ID", "Description", "Made", "Total", "Finished", "Failed", "Retrying", "Error",
         "Done", "State"],
        [(out.name(t["id"]), out.cut(t["description"], 40), out.when(t["created_at"], ctx.now),
          *(out.count(t["summary"][n]) for n in ("total", "finished", "failed", "retrying",
                                                   "error")),
          f"{t['summary']['percent']} %", t["state"])
         for t in rows],
        caption=out.plural(len(rows), "task"),
        right=("Total", "Finished", "Failed", "Retrying", "Error", "Done"))
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
