"""Busy: every live process (state, RSS, busy count, jobs it holds, hangs it reports) and the
jobs running now, each on its thread; quiet, stop or dump one process or all of them (Sidekiq's
remote signals, read on their next heartbeat).

"Stop all 4 processes?" sends the identities the page listed, and acts on those still live:
a process started since is not stopped by a question that did not count it, and no identity
means "all" (red team RT1, finding 12: a process named ``*``, a name Redis can hold, stopped
every process from its own row's Stop)."""
from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from ..ctlprocs import describe_hang
from ..ctltext import name as ctl_name
from .filters import plural
from .render import act, form_text, form_texts, render, web_of

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
        if form.get("scope") == "all":
            listed = set(form_texts(form, "identity"))
            live = [p for p in web.admin.processes() if p.identity in listed]
            for p in live:
                p.signal(SIGNALS[action])
            return f"{action} sent to {plural(len(live), 'process', 'processes')}"
        process = web.admin.process(identity)
        if process is None:
            return f"no live process {ctl_name(identity)}"
        process.signal(SIGNALS[action])
        return f"{action} sent to {ctl_name(identity)}"
    return await act(request, work, "busy")


routes = [Route("/busy", busy, name="busy"),
          Route("/busy", signal, methods=["POST"], name="busy_signal")]
