"""``queuedctl``'s process commands: processes, running, quiet/stop/dump, ping, version.

Processes are every live member of ``processes``, queued's and Sidekiq's alike (both write
Sidekiq's heartbeat). Signals go the way Sidekiq's API sends them (``<identity>-signals``), so
a process acts on one at its next heartbeat (5 s by default), not at once.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys

from .. import __version__
from .api import Process
from . import ctlout as out, ctltext
from .ctlcmds import Command, Context, Unhealthy, Usage, json_flag

#: A process whose last beat is older than this is shown as stale (Sidekiq's record lives
#: 60 s after its last beat; queued and Sidekiq beat every 5 s).
STALE_AFTER = 30.0


# --- processes, running -------------------------------------------------------------------------

def _state(p: Process, now: float) -> str:
    if p.beat is not None and now - p.beat > STALE_AFTER:
        return "stale"
    return "quiet" if p.is_quiet else "running"


def _process_dict(p: Process) -> dict:
    labels = p.info.get("labels")
    return {**p.as_dict(), "labels": labels if isinstance(labels, list) else []}


def run_processes(ctx: Context, args) -> int:
    procs = ctx.admin.processes()
    if args.json:
        out.emit_json([_process_dict(p) for p in procs])
        return 0
    now = ctx.now
    busy = sum(p.busy for p in procs)
    threads = sum(p.concurrency for p in procs)
    out.print_table(
        "Processes", ["Identity", "Tag", "Started", "Queues", "Busy", "Reserved", "State",
                      "Beat", "RSS"],
        [(out.name(p.identity), out.name(p.tag) if p.tag else "", out.when(p.started_at, now),
          ", ".join(out.name(q) for q in dict.fromkeys(p.queues)),
          f"{p.busy}/{p.concurrency}", str(p.reserved), _state(p, now), out.when(p.beat, now),
          out.megabytes(p.rss_kb)) for p in procs],
        caption=f"{out.plural(len(procs), 'process')}, {busy} of {threads} busy",
        right=("Busy", "Reserved", "RSS"))
    # Hangs a process reports (heartbeat.hangs), under the table; off a terminal on stderr,
    # so stdout stays one line per process
    stream = sys.stderr if out.lines_only() else None
    for p in procs:
        for hang in p.hangs:
            out.say(f"{out.name(p.identity)}: {describe_hang(hang)}", stream)
    return 0


def describe_hang(hang: dict) -> str:
    """One line for a hang a process reported (heartbeat.hangs)."""
    if "loop_lag" in hang:
        return (f"worker {hang.get('worker')} pid {hang.get('pid')}: its event loop has not run "
                f"for {hang.get('loop_lag')}s" + (f", stuck in job {_name(hang['jid'])}"
                                                    if hang.get("jid") else ""))
    return (f"worker {hang.get('worker')} pid {hang.get('pid')} thread {hang.get('thread')}: "
            f"{_name(hang.get('class'))} jid={_name(hang.get('jid'))} is {hang.get('over')}s "
            "past its timeout")


def _name(value) -> str:
    # (a hang's class and jid are names as any other: ctltext.name, as the dashboard shows it)
    return ctltext.name(value if isinstance(value, str) else str(value))


def run_running(ctx: Context, args) -> int:
    running = ctx.admin.running(ctx.now)
    if args.json:
        out.emit_json([r.as_dict() for r in running])
        return 0
    # (PID and Worker as the job's log lines say them: pid=4242 tid=w3)
    out.print_table(
        "Running jobs", ["Process", "PID", "Worker", "JID", "Queue", "Class", "Args",
                         "Started"],
        [(out.name(r.identity), "-" if r.pid is None else r.pid, r.worker, out.name(r.entry.jid),
          out.name(r.queue), out.name(r.entry.klass), out.compact(r.entry.args, 50),
          out.when(r.run_at, ctx.now))
         for r in running],
        caption=f"{out.plural(len(running), 'job')} running", right=("PID",))
    return 0


# --- quiet, stop, dump --------------------------------------------------------------------------

SIGNALS = {"quiet": ("TSTP", "goes quiet (takes no new jobs)"),
           "stop": ("TERM", "stops (running jobs finish within its shutdown timeout)"),
           "dump": ("TTIN", "logs what each worker is running and its stacks")}


def _target_arguments(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("identity", metavar="IDENTITY", nargs="?",
                       help="the process (queuedctl processes lists them; a unique start of "
                            "one, such as HOST:PID, will do)")
    which.add_argument("--all", action="store_true", help="every live process")
    json_flag(p)


def _check_target(args) -> None:
    if not args.all and not args.identity:
        raise Usage("give a process's IDENTITY, or --all")


def _targets(ctx: Context, args) -> list[Process]:
    procs = ctx.admin.processes()
    if args.all:
        if not procs:
            raise Unhealthy("no live processes")
        return procs
    exact = [p for p in procs if p.identity == args.identity]
    found = exact or [p for p in procs if p.identity.startswith(args.identity)]
    if not found:
        raise Unhealthy(f"no live process {out.name(args.identity)} (queuedctl processes "
                        f"lists them)")
    if len(found) > 1:
        raise Usage(f"{out.name(args.identity)} could be any of "
                    f"{', '.join(out.name(p.identity) for p in found)}: give more of it")
    return found


def _run_signal(command: str):
    signal_name, effect = SIGNALS[command]

    def run(ctx: Context, args) -> int:
        targets = _targets(ctx, args)
        for p in targets:
            p.signal(signal_name)
        if args.json:
            out.emit_json({"signal": signal_name,
                           "processes": [p.identity for p in targets]})
        else:
            for p in targets:
                out.say(f"{signal_name} sent to {out.name(p.identity)}: it {effect} at its "
                        f"next heartbeat")
        return 0
    return run


# --- ping ---------------------------------------------------------------------------------------

def _ping_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--queue", metavar="QUEUE",
                   help="also need a live, non-quiet process that serves QUEUE")
    p.add_argument("--local", action="store_true",
                   help="count only processes of this host ($DYNO, else the hostname, as "
                        "the daemon names itself): a probe for this pod's own daemon")
    p.add_argument("--max-age", type=float, default=STALE_AFTER, metavar="SECONDS",
                   help=f"a process whose last heartbeat is older is not live "
                        f"(default {STALE_AFTER:g})")


def run_ping(ctx: Context, args) -> int:
    """Silent on success (a probe's log stays clean); one line on stderr otherwise."""
    ctx.client.ping()
    if not args.queue and not args.local:
        return 0
    host = os.environ.get("DYNO") or socket.gethostname()
    procs = ctx.admin.processes()
    what = "process" + (f" serving queue {args.queue}" if args.queue else "") + (
        f" on {host}" if args.local else "")
    procs = [p for p in procs if (not args.local or p.hostname == host) and
             (not args.queue or args.queue in p.queues)]
    if not procs:
        raise Unhealthy(f"no live {what}")
    awake = [p for p in procs if not p.is_quiet]
    if not awake:
        raise Unhealthy(f"every {what} is quiet ({', '.join(p.identity for p in procs)})")
    if not any(p.beat is not None and ctx.now - p.beat <= args.max_age for p in awake):
        newest = max((p.beat or 0.0) for p in awake)
        raise Unhealthy(f"no {what} has beaten for {out.duration(ctx.now - newest)} "
                        f"(--max-age {args.max_age:g} s)")
    return 0


def run_version(ctx: Context, args) -> int:
    if args.json:
        out.emit_json({"version": __version__})
    else:
        out.say(f"queuedctl (queued) {__version__}")
    return 0


PING_EPILOG = """\
Exit 0 (printing nothing) when Redis answers and, with --queue or --local, a process with a
fresh heartbeat that is not quiet matches; 1 otherwise, with the reason on stderr; 3 when
Redis is unreachable.

examples:
  queuedctl ping                              # is Redis there?
  queuedctl ping --queue default              # is anyone working queue default?
  queuedctl ping --local --timeout 2          # is this host's daemon alive? (k8s liveness)
"""

COMMANDS = [
    Command("processes", "the live processes (queued's and Sidekiq's): busy, quiet, beat",
            run_processes, json_flag, tables=True, aliases=("ps",),
            epilog="examples:\n  queuedctl processes\n  queuedctl processes --json"),
    Command("running", "the jobs running now, in every process", run_running, json_flag,
            tables=True, aliases=("workers",),
            epilog="example:\n  queuedctl running --json"),
    Command("quiet", "a process stops taking jobs (then stop it)", _run_signal("quiet"),
            _target_arguments, check=_check_target,
            description="Send TSTP the way Sidekiq's API does: the process finishes its "
            "running jobs, takes no new ones and shows quiet; follow with stop.",
            epilog="examples:\n  queuedctl quiet web-1:4721:0f3a9c2b1d4e\n"
            "  queuedctl quiet --all"),
    Command("stop", "a process shuts down cleanly", _run_signal("stop"), _target_arguments,
            check=_check_target,
            description="Send TERM the way Sidekiq's API does: the process stops fetching, "
            "waits for its running jobs up to its shutdown timeout, puts back the rest, "
            "and exits 0.",
            epilog="examples:\n  queuedctl stop web-1:4721\n  queuedctl stop --all"),
    Command("dump", "a process logs its running jobs and stacks", _run_signal("dump"),
            _target_arguments, check=_check_target,
            epilog="example:\n  queuedctl dump --all   # then read the daemons' logs"),
    Command("ping", "health probe: exit 0 when Redis (and a process) answers", run_ping,
            _ping_arguments, epilog=PING_EPILOG),
    Command("version", "print queued's version", run_version, json_flag,
            epilog="examples:\n  queuedctl version\n  queuedctl version --json"),
]
