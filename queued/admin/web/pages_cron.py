"""Cron: the periodic jobs every master pushes (the config file's ``:scheduler: :schedule:`` and
``@queued.periodic``; sidekiq-cron's too), each with its schedule and the clock it follows,
class, queue, next and last run and status; Enqueue now, Disable, Enable: what ``queuedctl
cron`` shows and does, through the same functions (admin/periodicjobs.py)."""
from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from ..ctltext import name as ctl_name
from ..periodicjobs import NoSuchJob, enqueue_now, pushed_text, schedules, set_status, \
    status_text
from .render import act, form_text, render, web_of


def cron(request: Request):
    web = web_of(request)
    rows = schedules(web.r, web.keys)
    return render(request, "cron.html", {
        "rows": rows, "disabled": sum(r["status"] != "enabled" for r in rows)})


async def cron_action(request: Request):
    def work(web, form) -> str:
        name, action = form_text(form, "name"), str(form.get("action", ""))
        try:
            if action == "enqueue":
                return pushed_text(ctl_name(name), enqueue_now(web.r, web.keys, name))
            if action in ("enable", "disable"):
                status = action + "d"
                return status_text(ctl_name(name), set_status(web.r, web.keys, name, status),
                                   status)
        except NoSuchJob as e:
            return str(e)
        return f"unknown action {action!r}"
    return await act(request, work, "cron")


routes = [Route("/cron", cron, name="cron"),
          Route("/cron", cron_action, methods=["POST"], name="cron_action")]
