"""Job code with every kind of hook, for tests/integration/test_daemon_hooks.py: server
middleware (one that passes, one that stops the chain or raises), lifecycle events, an error
handler, ``retry_in`` and ``retries_exhausted``. A daemon loads this file (``-r``); the tests
never import it, so nothing here is registered in the test process.

Every hook appends one JSON record ``{"what", "pid", ...}`` to the Redis list ``NOTES``, so a
test can tell what ran, in which order, and in which process (the master or a worker).
"""
import json
import os
import signal
import time

import psutil

import queued

NOTES = "t:hooks:notes"
#: retry_in's answer: far beyond any test, so a retry stays in ``retry``.
LATER = 1000


def note(what, **fields):
    queued.get_redis().rpush(NOTES, json.dumps({"what": what, "pid": os.getpid(), **fields}))


# --- server middleware: Outer, then Gate, then Inner, around every job ------------------------

class Outer:
    name = "outer"

    def __call__(self, job, msg, queue, call_next):
        note(f"{self.name}:before", jid=msg["jid"], queue=queue, job=type(job).__name__)
        result = call_next()
        note(f"{self.name}:after", jid=msg["jid"])
        return result


class Inner(Outer):
    name = "inner"


class Gate:
    """Stops the chain for args[0] == "skip" (the job is not performed, and is done) and
    raises for "refuse" (the job fails with the middleware's error)."""

    def __call__(self, job, msg, queue, call_next):
        mode = msg["args"][0] if msg["args"] else None
        if mode == "skip":
            note("gate:skip", jid=msg["jid"])
            return None
        if mode == "refuse":
            raise PermissionError("the gate middleware refused this job")
        return call_next()


queued.server_middleware.add(Outer)
queued.server_middleware.add(Gate)
queued.server_middleware.add(Inner)


# --- lifecycle events and error handlers ----------------------------------------------------

def _event(name):
    def handler():
        # children: how many processes the master had forked when the event fired
        note(name, children=len(psutil.Process().children()))
    handler.__qualname__ = f"on_{name}"
    return handler


for _name in ("startup", "quiet", "shutdown", "heartbeat"):
    queued.on(_name)(_event(_name))


def report_error(exc, context):
    note("error_handler", error=type(exc).__name__, jid=context["job"]["jid"],
         queue=context["queue"], outcome=context["outcome"])


queued.error_handlers.append(report_error)


# --- jobs ------------------------------------------------------------------------------------

class Noted(queued.Job):
    """Records its hooks' calls: retry_in (always LATER) and retries_exhausted."""
    queued_options = {"abstract": True}

    @classmethod
    def retry_in(cls, count, exc):
        note("retry_in", job=cls.__name__, count=count, error=type(exc).__name__)
        return LATER

    @classmethod
    def retries_exhausted(cls, msg, exc):
        note("retries_exhausted", job=cls.__name__, jid=msg["jid"], error=type(exc).__name__,
             error_class=msg.get("error_class"))


class HookJob(Noted):
    """Performs (recorded); args[0] == "fail" raises."""
    queued_options = {"retry": 2}

    def perform(self, mode="ok"):
        note("perform", jid=self.jid)
        if mode == "fail":
            raise ValueError("the job failed")


class WedgedJob(Noted):
    """Blocks SIGALRM past its 0.3 s timeout, so the master kills its worker (retries left)."""
    queued_options = {"timeout": 0.3, "retry": 2}

    def perform(self):
        note("perform", jid=self.jid)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(30)


class PoisonJob(Noted):
    """Kills its own worker every time; ``dead: false``, so it is dropped, not kept in dead."""
    queued_options = {"retry": 5, "dead": False}

    def perform(self):
        note("perform", jid=self.jid)
        os.kill(os.getpid(), signal.SIGKILL)
