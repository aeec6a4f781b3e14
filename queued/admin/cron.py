"""``queuedctl cron``: the periodic jobs as every master and the dashboard see them in Redis
(sidekiq-cron's ``cron_jobs`` / ``cron_job:<name>``): list them with their next and last run
and status, push one now, disable or enable one.

The status written here is the operator's and survives restarts and deploys (the masters'
cron_sync.lua keeps it) until a deploy changes the schedule's ``enabled:`` in the file. A
disabled schedule is skipped by cron_enqueue.lua at its ticks; ``enqueue`` pushes it anyway
(an operator asking for one run now means it).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import time

from ..keys import Keys
from ..payload import new_jid
from ..cronspec import parse_cron, parse_every
from ..periodic import enqueue, stamp
from ..values import Invalid
from . import ctlout as out
from .ctlcmds import Command, Context, Unhealthy, Usage, json_flag

ACTIONS = ("list", "enqueue", "disable", "enable")


def _text(raw: dict, field: str) -> str:
    return raw.get(field.encode(), b"").decode("utf-8", "replace")


def _last_run(raw: dict) -> float | None:
    text = _text(raw, "last_enqueue_time")
    for fmt in ("%Y-%m-%d %H:%M:%S %z", "%Y-%m-%dT%H:%M:%S%z"):
        try:
            return dt.datetime.strptime(text, fmt).timestamp()
        except ValueError:
            continue
    return None


def _next_run(raw: dict, now: float) -> float | None:
    """From queued's own fields, else sidekiq-cron's ``cron`` (a schedule Ruby wrote)."""
    kind, timing = _text(raw, "queued_kind"), _text(raw, "queued_timing")
    try:
        if kind == "every":
            return parse_every(timing).next_after(now)
        return parse_cron(timing or _text(raw, "cron")).next_after(now)
    except Invalid:
        return None


def _queue(raw: dict) -> str:
    try:
        return str(json.loads(_text(raw, "message")).get("queue") or "default")
    except (ValueError, AttributeError):
        return "default"


def schedules(ctx: Context) -> list[dict]:
    keys = Keys(ctx.namespace)
    members = sorted(m.decode("utf-8", "replace") for m in ctx.client.smembers(keys.cron_jobs))
    pipe = ctx.client.pipeline(transaction=False)
    for member in members:
        pipe.hgetall(keys.ns + member)
    rows = []
    for member, raw in zip(members, pipe.execute()):
        if not raw:
            continue
        status = _text(raw, "status") or "enabled"
        rows.append({
            "name": _text(raw, "name") or member.split(":", 1)[-1],
            "schedule": _text(raw, "queued_timing") or _text(raw, "cron"),
            "class": _text(raw, "klass"), "queue": _queue(raw), "status": status,
            "last_run": _last_run(raw),
            "next_run": _next_run(raw, ctx.now) if status == "enabled" else None,
            "description": _text(raw, "description"),
            "defined_by": _text(raw, "queued_where") or "sidekiq-cron"})
    return rows


def _find(ctx: Context, name: str) -> dict:
    raw = ctx.client.hgetall(Keys(ctx.namespace).cron_job(name))
    if not raw:
        raise Unhealthy(f"no periodic job named {name!r} (queuedctl cron lists them)")
    return raw


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
    rows = schedules(ctx)
    if args.json:
        out.emit_json(rows)
        return 0
    now = ctx.now
    out.print_table(
        "Periodic jobs", ["Name", "Schedule", "Class", "Queue", "Status", "Next run", "Last run"],
        [(r["name"], r["schedule"], r["class"], r["queue"], r["status"],
          _when(r["next_run"], now), out.when(r["last_run"], now)) for r in rows],
        caption=f"{out.plural(len(rows), 'periodic job')}, "
                f"{sum(r['status'] != 'enabled' for r in rows)} disabled")
    return 0


def _when(epoch: float | None, now: float) -> str:
    if epoch is None:
        return "-"
    stamp_text = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
    return f"{stamp_text} ({out.when(epoch, now)})"


def _enqueue(ctx: Context, args) -> int:
    raw = _find(ctx, args.name)
    try:
        template = json.loads(_text(raw, "message"))
        template["class"], template.setdefault("queue", "default")
    except (ValueError, KeyError, TypeError):
        raise Unhealthy(f"periodic job {args.name!r} has no usable message in Redis") from None
    now = time.time()
    msg = stamp(template, args.name, None, now, new_jid())
    answer = enqueue(ctx.client, Keys(ctx.namespace), args.name, msg, now)
    if answer != "enqueued":
        raise Unhealthy(f"periodic job {args.name!r} was not pushed ({answer})")
    if args.json:
        out.emit_json({"name": args.name, "jid": msg["jid"], "queue": msg["queue"]})
    else:
        out.say(f"pushed {msg['class']} jid={msg['jid']} to queue {msg['queue']} "
                f"(periodic job {args.name})")
    return 0


def _set_status(ctx: Context, args, status: str) -> int:
    before = _text(_find(ctx, args.name), "status") or "enabled"
    ctx.client.hset(Keys(ctx.namespace).cron_job(args.name), "status", status)
    if args.json:
        out.emit_json({"name": args.name, "status": status, "changed": before != status})
    elif before == status:
        out.say(f"periodic job {args.name} was already {status}")
    else:
        out.say(f"periodic job {args.name} {status}: "
                + ("no master pushes it at its ticks until it is enabled again"
                   if status == "disabled" else "pushed again from its next tick"))
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
