"""Job classes for the Sidekiq API, Web UI and ActiveJob interop tests (test_sidekiq_api.py,
test_web_ui.py, test_activejob.py). The daemon loads this file by path next to tests/jobs.py
(``sidekiq_support.INTEROP_REQUIRE``); the tests never import it, so its classes are not
registered in the test process.

They record in Redis under ``t:`` keys: the same ``t:runs``/``t:done`` hashes as tests/jobs.py
(so ``harness.counts`` works), and ``t:aj`` for the ActiveJob runs.
"""
import json
import time

import queued

RUNS = "t:runs"   # hash jid -> runs started
DONE = "t:done"   # hash jid -> runs finished
AJ_RUNS = "t:aj"  # list of JSON {jid, queue, args, at, msg_class, wrapped}, one per HardJob run

#: Seconds before queued retries these jobs by itself: far beyond any test, so a failure stays
#: in ``retry`` (however loaded the machine) until the test moves it.
LATER = 3600


def _r():
    return queued.get_redis()


class ApiFlaky(queued.Job):
    """Fails on its first run (per jid), succeeds on every later one. Its first retry is an
    hour away, so only the Ruby API's ``retry`` brings it back during a test."""

    @classmethod
    def retry_in(cls, count, exc):
        return LATER

    def perform(self, *args):
        if _r().hincrby(RUNS, self.jid, 1) == 1:
            self.first_run(list(args))
        _r().hincrby(DONE, self.jid, 1)

    def first_run(self, args):
        # (raised two calls down: its stack holds at least three frames of this file, so a
        # backtrace option of 3 keeps three lines however few frames queued's own path adds)
        self.refuse(args)

    def refuse(self, args):
        raise RuntimeError(f"flaky first run {args!r}")


class ApiFailLate(queued.Job):
    """Always fails (a unicode message); retried an hour later, so its entry stays in
    ``retry`` for the whole test."""

    @classmethod
    def retry_in(cls, count, exc):
        return LATER

    def perform(self, *args):
        _r().hincrby(RUNS, self.jid, 1)
        raise RuntimeError("late boom ünïcødé " + json.dumps(list(args), ensure_ascii=False))


class PyHardJob(queued.Job):
    """Serves Rails' ActiveJob ``HardJob`` under its Ruby name: the Python class name differs
    on purpose, so only the registered name can match the payload's ``wrapped`` class.
    Records each run with the unwrapped arguments it got; fails when the first is "fail"
    (retried an hour later, so the failure stays in ``retry`` until the test moves it)."""
    queued_options = {"name": "HardJob"}

    @classmethod
    def retry_in(cls, count, exc):
        return LATER

    def perform(self, *args, **kwargs):
        _r().rpush(AJ_RUNS, json.dumps({
            "jid": self.jid, "queue": self.queue, "args": list(args), "kwargs": kwargs,
            "at": time.time(),
            "msg_class": self.msg.get("class"), "wrapped": self.msg.get("wrapped")}))
        _r().hincrby(RUNS, self.jid, 1)
        if args and args[0] == "fail":
            raise RuntimeError("hard job failed")
        _r().hincrby(DONE, self.jid, 1)
