"""``queuedctl``'s commands for issue 21: ``limits`` (every rate limiter: its kind and size, how
many units are in use now, how many were granted at once or after a wait, how often it was over
its limit, how many jobs it rescheduled or holds parked), ``locks`` (the unique jobs' locks: the
jid holding each and its time left) and ``unlock`` (give locks up by hand).
"""
from __future__ import annotations

import argparse
import re

from ..limiter import INTERVALS
from . import ctlout as out
from .ctlcmds import Command, Context, Unhealthy, confirmed, json_flag, positive, yes_flag
from .limits import is_seconds
from .names import to_key

_DIGEST = re.compile(r"[0-9a-f]{40}")


# --- limits ---------------------------------------------------------------------------------------

def run_limits(ctx: Context, args) -> int:
    if args.name:
        info = ctx.admin.limits.get(args.name)
        if info is None:
            raise Unhealthy(f"no limiter named {args.name} on {ctx.where} (used in the last "
                            "90 days)")
        found = [info]
    else:
        found = ctx.admin.limits.all()
    if args.json:
        out.emit_json([{**info.as_dict(), "name": shown(info.name)} for info in found])
        return 0
    rows = []
    for info in found:
        c = info.counts
        rows.append((shown(info.name), _kind(info), out.count(info.size), _use(info.in_use),
                     out.count(c.get("waited", 0)), out.count(c.get("overlimit", 0)),
                     out.count(info.parked) if info.kind == "concurrent" else "-"))
        if info.trouble:  # (listed with what could be read; what is odd, said once)
            out.warn(f"limiter {shown(info.name)}: {info.trouble}")
    # (80 columns: the other counts, held, mean wait, rescheduled, last use, are in --json)
    out.print_table("Rate limiters", ["Limiter", "Kind", "Size", "In use", "Waited",
                                      "Over limit", "Parked"], rows,
                    caption=out.plural(len(found), "limiter"),
                    right=("Size", "In use", "Waited", "Over limit", "Parked"))
    return 0


def _kind(info) -> str:
    d = info.definition
    if info.kind == "bucket":
        return f"bucket {d.get('interval') if d.get('interval') in INTERVALS else '?'}"
    if info.kind in ("window", "leaky"):
        span = d.get("interval")
        return f"{info.kind} {out.duration(float(span)) if is_seconds(span) else '?'}"
    return info.kind or "?"


def shown(text: str) -> str:
    """A name read from Redis, printable: a byte that is not UTF-8 as \\xff (names.py)."""
    return to_key(text).decode("utf-8", "backslashreplace")


def _use(value: float) -> str:
    return out.count(int(value)) if float(value).is_integer() else f"{value:.2f}"


def _limits_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", nargs="?", help="one limiter only")
    json_flag(p)


# --- locks, unlock --------------------------------------------------------------------------------

def run_locks(ctx: Context, args) -> int:
    locks = ctx.admin.locks.scan(limit=args.limit)
    if args.json:
        out.emit_json([{**lock.as_dict(), "digest": shown(lock.digest), "jid": shown(lock.jid)}
                       for lock in locks])
        return 0
    for lock in locks:
        if lock.trouble:
            out.warn(f"lock {shown(lock.digest)}: {lock.trouble}")
    out.print_table("Unique locks", ["Digest", "JID", "Time left"],
                    [(shown(lock.digest), shown(lock.jid) or "?",
                      out.duration(lock.ttl) if lock.ttl is not None else "no TTL")
                     for lock in locks],
                    caption=out.plural(len(locks), "lock"), right=("Time left",),
                    more=f"the first {args.limit}; --limit N for more"
                    if len(locks) == args.limit else None)
    return 0


def _locks_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=positive, default=1000, metavar="N",
                   help="show at most N locks (default 1000)")
    json_flag(p)


def run_unlock(ctx: Context, args) -> int:
    if args.all:
        confirmed(args, "Give up every unique lock (duplicates of pending jobs may then be "
                        "pushed)?", "unlocking every lock")
        done = ctx.admin.locks.release_all()
        released = {"released": done}
    else:
        released = {d: ctx.admin.locks.release(d) for d in args.digests}
        done = sum(released.values())
    if args.json:
        out.emit_json(released if not args.all else {"released": done})
    else:
        out.say(f"gave up {out.plural(done, 'lock')}")
    if not args.all and not all(released.values()):
        missing = ", ".join(d for d, ok in released.items() if not ok)
        raise Unhealthy(f"no lock {missing} (expired, or released already)")
    return 0


def _unlock_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("digests", metavar="DIGEST", nargs="*", type=_digest,
                   help="the lock's digest (queuedctl locks lists them)")
    p.add_argument("--all", action="store_true", help="every lock")
    yes_flag(p)
    json_flag(p)


def _check_unlock(args) -> None:
    from .ctlcmds import Usage
    if bool(args.all) == bool(args.digests):
        raise Usage("give DIGEST... or --all")


def _digest(text: str) -> str:
    if not _DIGEST.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a lock digest (40 hex characters)")
    return text


COMMANDS = [
    Command("limits", "rate limiters: size, in use, waited, over limit, parked", run_limits,
            _limits_arguments, tables=True,
            description="Every queued.Limiter used in the last 90 days (shared by every "
            "process on this Redis): its kind and size, the units in use now, the units "
            "granted at once and after a wait (and the mean wait), how often a caller got "
            "OverLimit, how many jobs were rescheduled after one, and (concurrent) how many "
            "are parked until a unit frees. The table shows what fits 80 columns; --json "
            "has every count.",
            epilog="examples:\n  queuedctl limits\n  queuedctl limits stripe --json"),
    Command("locks", "unique jobs' locks: the jid holding each, time left", run_locks,
            _locks_arguments, tables=True,
            description="The locks of unique jobs (unique_for): one per pending job, each "
            "with the jid holding it and the time left before it expires by itself. Found "
            "with SCAN (there is no index of locks).",
            epilog="examples:\n  queuedctl locks\n  queuedctl find JID   # where its job is"),
    Command("unlock", "give unique locks up by hand (the next push of their job goes in)",
            run_unlock, _unlock_arguments, check=_check_unlock,
            epilog="examples:\n  queuedctl unlock 3f0c...9a\n  queuedctl unlock --all --yes"),
]
