"""``queuedctl web``: the dashboard (queued/admin/web/), served by uvicorn on loopback unless
told otherwise. Needs the ``web`` extra; without it the command says so and exits 2."""
from __future__ import annotations

import argparse
import logging
import os
import socket
import sys

from .ctlcmds import Command, Context, Usage
from .hosts import parse_host

DEFAULT_BIND = "127.0.0.1:7433"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
WILDCARD = ("0.0.0.0", "::")
INSTALL_HINT = "the dashboard needs the web extra: pip install 'queued-jobs[web]'"

EPILOG = """\
examples:
  queuedctl web                                   # http://127.0.0.1:7433/
  queuedctl -C config/sidekiq.yml web --bind 127.0.0.1:8080
  QUEUED_WEB_AUTH=admin:s3cret queuedctl web --bind 0.0.0.0:7433
  queuedctl web --bind 127.0.0.1:7433 --allow-host ops.example.com   # behind a proxy
Anyone who can reach the dashboard can retry, delete and stop: keep it on loopback behind a
proxy that authenticates (docs/dashboard.md), or give --auth. Requests naming another host
than the bound address or an --allow-host name are refused (DNS rebinding)."""


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[v6]:PORT`` or ``:PORT`` (loopback) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise Usage(f"--bind must be HOST:PORT, not {text!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bind", metavar="HOST:PORT", default=DEFAULT_BIND,
                   help=f"where to listen (default {DEFAULT_BIND}: this machine only)")
    p.add_argument("--auth", metavar="USER:PASSWORD", default=os.environ.get("QUEUED_WEB_AUTH"),
                   help="require HTTP basic auth (else $QUEUED_WEB_AUTH; use TLS in front)")
    p.add_argument("--poll", metavar="SECONDS", type=float, default=2.0,
                   help="how often the overview's live graph polls (default 2)")
    p.add_argument("--root-path", metavar="PREFIX", default="",
                   help="the path prefix a reverse proxy serves the dashboard under (/queued)")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.add_argument("--allow-host", metavar="NAME", action="append", default=[],
                   help="also answer requests naming this host (NAME on any port, or "
                        "NAME:PORT; repeatable): the names a proxy or people use. Others than "
                        "the bound address are refused (DNS rebinding)")


def allowed_hosts(host: str, port: int, extra: list[str]) -> list[str]:
    """The Host values the dashboard answers: its bound address on its port (every loopback
    name for a loopback or every-address bind), and the names the operator allows."""
    shown = f"[{host}]" if ":" in host else host
    names = [f"{shown}:{port}"]
    if host in LOOPBACK or host.startswith("127.") or host in WILDCARD:
        names += [f"{n}:{port}" for n in ("127.0.0.1", "localhost", "[::1]")]
    return names + list(extra)


def _check(args: argparse.Namespace) -> None:
    parse_bind(args.bind)
    for name in args.allow_host:
        if name != "*" and parse_host(name) is None:
            raise Usage(f"--allow-host must be a host name, NAME:PORT or [V6]:PORT, "
                        f"not {name!r}")
    if args.auth is not None and (":" not in args.auth or args.auth.startswith(":")):
        raise Usage("--auth must be USER:PASSWORD")
    if not 0.2 <= args.poll <= 60:
        raise Usage("--poll must be between 0.2 and 60 seconds")


def run_web(ctx: Context, args: argparse.Namespace) -> int:
    try:
        import uvicorn
        from .web import create_app
    except ImportError as e:
        sys.stderr.write(f"queuedctl: {INSTALL_HINT} ({e})\n")
        return 2
    host, port = parse_bind(args.bind)
    ctx.client.ping()  # unreachable Redis: exit 3 now, not an error page later
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        raise Usage(f"cannot listen on {args.bind}: {e.strerror or e}") from None
    bound = sock.getsockname()[1]
    app = create_app(ctx.client, namespace=ctx.namespace, auth=args.auth,
                     poll_interval=args.poll, dead_limits=ctx.dead_limits,
                     allowed_hosts=allowed_hosts(host, bound, args.allow_host))
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"queuedctl web: dashboard at http://{shown}:{bound}/ "
                     f"(Redis {ctx.where}); Ctrl-C stops it\n")
    if host in WILDCARD and not args.allow_host:
        sys.stderr.write("queuedctl web: listening on every address, but answering only "
                         "requests for the loopback names: give --allow-host NAME for the "
                         "names people reach it by\n")
    if host not in LOOPBACK and not args.auth:
        sys.stderr.write("queuedctl web: warning: listening beyond loopback with no --auth: "
                         "anyone who reaches it can act on your jobs\n")
    sys.stderr.flush()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = uvicorn.Config(app, log_level="warning", access_log=args.access_log,
                            server_header=False, proxy_headers=False, lifespan="off",
                            root_path=args.root_path.rstrip("/"))
    uvicorn.Server(config).run(sockets=[sock])
    return 0


COMMANDS = [
    Command("web", "the dashboard in a browser (loopback by default)", run_web, _arguments,
            check=_check, epilog=EPILOG,
            description="Serve the web dashboard: overview with a live graph, busy processes, "
                        "queues, scheduled/retry/dead jobs with search and bulk actions, tasks, "
                        "per-class metrics, and Prometheus cluster gauges at /metrics."),
]
