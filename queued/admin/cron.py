"""``queuedctl cron``: the periodic jobs as every master and the dashboard see them in Redis
(sidekiq-cron's ``cron_jobs`` / ``cron_job:<name>``): list them with their next and last run
and status, push one now, disable or enable one. What it reads and writes is periodicjobs.py's,
which the dashboard's Cron page calls too.
"""
from __future__ import annotations

import argparse
import time

from ..keys import Keys
from . import ctlout as out
from .ctlcmds import Command, Context, Unhealthy, Usage, json_flag
from .periodicjobs import NoSuchJob, enqueue_now, pushed_text, schedules, set_status, \
    status_text

ACTIONS = ("list", "enqueue", "disable", "enable")


def run_cron(ctx: Context, args) -> int:
    action = args.action or "list"
    if action == "list":
        return _list(ctx, args)
    if not args.name:
        raise Usage(f"cron {action} needs the NAME of a periodic job")
    if action == "enqueue":
        return _enqueue(ctx, args)
    return _set_status(ctx, args, "enabled" if action == "enable" else "disabled")


def _list(ctx: Context, args) -> int:
    rows = schedules(ctx.client, Keys(ctx.namespace), ctx.now)
    if args.json:
        out.emit_json(rows)
        return 0
    now = ctx.now
    out.print_table(
        "Periodic jobs", ["Name", "Schedule", "Class", "Queue", "Status", "Next run", "Last run"],
        [(out.name(r["name"]), _schedule(r), out.name(r["class"]), out.name(r["queue"]),
          r["status"],
          _when(r["next_run"], now), out.when(r["last_run"], now)) for r in rows],
        caption=f"{out.plural(len(rows), 'periodic job')}, "
                f"{sum(r['status'] != 'enabled' for r in rows)} disabled")
    return 0


def _schedule(row: dict) -> str:
    """``0 9 * * * (Europe/Berlin)``, ``*/5 * * * * (UTC)``, ``every 30s``: the clock said."""
    if row["kind"] == "every":
        return f"every {row['schedule']}"
    return f"{row['schedule']} ({row['zone']})" if row["zone"] not in row["schedule"] \
        else row["schedule"]


def _when(epoch: float | None, now: float) -> str:
    if epoch is None:
        return "-"
    stamp_text = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
    return f"{stamp_text} ({out.when(epoch, now)})"


def _enqueue(ctx: Context, args) -> int:
    try:
        msg = enqueue_now(ctx.client, Keys(ctx.namespace), args.name)
    except NoSuchJob as e:
        raise Unhealthy(str(e)) from None
    if args.json:
        out.emit_json({"name": args.name, "jid": msg["jid"], "queue": msg["queue"]})
    else:
        out.say(pushed_text(out.name(args.name), msg))
    return 0


def _set_status(ctx: Context, args, status: str) -> int:
    try:
        before = set_status(ctx.client, Keys(ctx.namespace), args.name, status)
    except NoSuchJob as e:
        raise Unhealthy(str(e)) from None
    if args.json:
        out.emit_json({"name": args.name, "status": status, "changed": before != status})
    else:
        out.say(status_text(out.name(args.name), before, status))
    return 0


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=ACTIONS, metavar="ACTION",
                   help="list (the default), enqueue NAME (push one now), disable NAME, "
                        "enable NAME")
    p.add_argument("name", nargs="?", metavar="NAME", help="the periodic job's name")
    json_flag(p)


COMMANDS = [
    Command("cron", "periodic jobs: list (next and last run, status), enqueue NAME now, "
            "disable NAME, enable NAME", run_cron, _arguments, tables=True,
            description="The periodic jobs every master pushes (the config file's "
            ":scheduler: :schedule: and @queued.periodic), as they are in Redis: "
            "sidekiq-cron's layout, which its Web UI tab shows too. A disabled job is not "
            "pushed at its ticks until enabled again; that survives restarts and deploys, "
            "until a deploy changes its enabled: in the file.",
            epilog="examples:\n  queuedctl cron\n  queuedctl cron --json\n"
                   "  queuedctl cron enqueue nightly_report\n  queuedctl cron disable "
                   "nightly_report"),
]
