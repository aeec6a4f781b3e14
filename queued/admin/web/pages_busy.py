"""Busy: every live process (state, RSS, busy count, jobs it holds, hangs it reports) and the
jobs running now, each on its thread; quiet, stop or dump one process or all of them (Sidekiq's
remote signals, read on their next heartbeat)."""
from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from ..ctlprocs import describe_hang
from .render import act, form_text, render, web_of

SIGNALS = {"quiet": "TSTP", "stop": "TERM", "dump": "TTIN"}


def busy(request: Request):
    web = web_of(request)
    processes = web.admin.processes()
    return render(request, "busy.html", {
        "processes": processes, "running": web.admin.running(),
        "busy_total": sum(p.busy for p in processes),
        "concurrency_total": sum(p.concurrency for p in processes),
        "hang": describe_hang})


async def signal(request: Request):
    def work(web, form) -> str:
        action, identity = str(form.get("action", "")), form_text(form, "identity")
        if action not in SIGNALS:
            return f"unknown action {action!r}"
        if identity == "*":
            n = web.admin.signal_all(SIGNALS[action])
            return f"{action} sent to {n} process{'es' if n != 1 else ''}"
        process = web.admin.process(identity)
        if process is None:
            return f"no live process {identity}"
        process.signal(SIGNALS[action])
        return f"{action} sent to {identity}"
    return await act(request, work, "busy")


routes = [Route("/busy", busy, name="busy"),
          Route("/busy", signal, methods=["POST"], name="busy_signal")]
