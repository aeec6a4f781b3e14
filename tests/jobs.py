"""Job classes the tests run inside real daemons (like RQ's fixtures.py).

Every job records what it did in Redis under ``t:`` keys, so a test can count runs by jid.
"""
import ctypes
import os
import signal
import time

import queued

RUNS = "t:runs"        # hash jid -> number of times perform started
DONE = "t:done"        # hash jid -> number of times perform finished
ORDER = "t:order"      # list of tags in the order jobs ran


def _r():
    return queued.get_redis()


def _start(job, tag=None):
    r = _r()
    pipe = r.pipeline(transaction=False)
    pipe.hincrby(RUNS, job.jid, 1)
    if tag is not None:
        pipe.rpush(ORDER, tag)
    pipe.execute()


def _finish(job):
    _r().hincrby(DONE, job.jid, 1)


class Record(queued.Job):
    def perform(self, tag=None, *rest):
        _start(self, tag)
        _finish(self)


class Sleep(queued.Job):
    def perform(self, seconds, tag=None):
        _start(self, tag)
        time.sleep(seconds)
        _finish(self)


GATE = "t:gate:"       # key prefix: a Gate job runs until t:gate:<tag> exists


def open_gate(r, tag) -> None:
    """Let every Gate job waiting on ``tag`` (and every later one) finish."""
    r.set(GATE + tag, 1)


def wait_gate(tag, seconds=60) -> None:
    """Inside a job: return once the test opens the gate ``tag``; fail after ``seconds``, so
    a forgotten gate cannot wedge a worker."""
    end = time.monotonic() + seconds
    while not _r().exists(GATE + tag):
        if time.monotonic() > end:
            raise RuntimeError(f"gate {tag!r} was never opened")
        time.sleep(0.01)


class Gate(queued.Job):
    """Runs until the test opens its gate (``open_gate(r, tag)``): a job that is still
    running for exactly as long as a test needs it to be, however slow the machine is, and no
    longer. Gives up (fails) after ``seconds`` so a forgotten gate cannot wedge a worker."""

    def perform(self, tag, seconds=60):
        _start(self, tag)
        wait_gate(tag, seconds)
        _finish(self)


class Fail(queued.Job):
    queued_options = {"retry": 2}

    def perform(self, message="boom"):
        _start(self)
        raise RuntimeError(message)


class Crash(queued.Job):
    """Kills its own worker: how is "kill", "exit", "exit0" or "segv"."""
    queued_options = {"retry": 1}

    def perform(self, how="kill", times=1000):
        _start(self)
        if _r().hincrby("t:crashes", self.jid, 1) <= times:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif how == "exit":
                os._exit(7)
            elif how == "exit0":  # a job ending its process "successfully" mid-job
                os._exit(0)
            else:
                ctypes.string_at(0)
        _finish(self)


class BlockAlarm(queued.Job):
    """Ignores its time limit the way C code does: SIGALRM blocked."""
    queued_options = {"timeout": 0.3, "retry": 0}

    def perform(self, seconds):
        _start(self)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(seconds)
        _finish(self)


class Swallow(queued.Job):
    """Ignores its time limit the way careless code does: catches everything."""
    queued_options = {"timeout": 0.3, "retry": 0}

    def perform(self, seconds):
        _start(self)
        end = time.time() + seconds
        while time.time() < end:
            try:
                time.sleep(0.05)
            except BaseException:  # noqa: BLE001 - the point of this job
                pass
        _finish(self)


class Timed(queued.Job):
    queued_options = {"timeout": 0.3, "retry": 1}

    def perform(self, seconds):
        _start(self)
        time.sleep(seconds)
        _finish(self)


class Hooks(queued.Job):
    queued_options = {"retry": 0}

    def perform(self, fail=False):
        _start(self)
        if fail:
            raise ValueError("hook test")

    def after_succeeded(self):
        _r().rpush("t:hooks", f"ok:{self.jid}")

    def after_failed(self, exc):
        _r().rpush("t:hooks", f"failed:{self.jid}:{type(exc).__name__}")


STAMPS = "t:stamps"    # hash jid -> time.time() when perform started
MSGS = "t:msgs"        # list of the payloads (JSON) jobs saw, in run order


class SlowFirst(queued.Job):
    """Slow on its first run only, so a job requeued by a shutdown finishes fast next time."""

    def perform(self, seconds, tag=None):
        _start(self, tag)
        if int(_r().hget(RUNS, self.jid) or 0) <= 1:
            time.sleep(seconds)
        _finish(self)


class Stamp(queued.Job):
    """Records when it started (wall clock), for scheduling precision."""

    def perform(self, tag=None):
        _r().hset(STAMPS, self.jid, repr(time.time()))
        _start(self, tag)
        _finish(self)


class FailOnce(queued.Job):
    """Fails on its first run, succeeds after; records the payload it saw each time."""
    queued_options = {"retry": 3}

    @classmethod
    def retry_in(cls, count, exc):
        return 1

    def perform(self, *args):
        import json
        _r().rpush(MSGS, json.dumps(self.msg))
        _start(self)
        if int(_r().hget(RUNS, self.jid)) == 1:
            raise RuntimeError("first run fails")
        _finish(self)


class FailBacktrace(queued.Job):
    """Sidekiq's FailWorker from SIDEKIQ_FORMAT.md section 5."""
    queued_options = {"backtrace": True}

    def perform(self, *args):
        import json
        _start(self)
        raise RuntimeError("boom ünïcødé " + json.dumps(list(args), ensure_ascii=False))


class Patient(queued.Job):
    """A class-level timeout longer than the job, to beat a short config job_timeout."""
    queued_options = {"timeout": 5, "retry": 0}

    def perform(self, seconds):
        _start(self)
        time.sleep(seconds)
        _finish(self)


PICKUP = "t:pickup"    # list of "queue:seconds from push to start"


class Pickup(queued.Job):
    """Records how long after its push (``enqueued_at``) it started, and on which queue."""

    def perform(self):
        started = time.time()
        _r().rpush(PICKUP, f"{self.queue}:{started - self.msg['enqueued_at']!r}")


class Chatty(queued.Job):
    """Logs through the logging module, as job code does, then fails when asked to."""
    queued_options = {"retry": 3}

    def perform(self, fail=False):
        import logging
        logging.getLogger("app.chatty").warning("working on it")
        _start(self)
        if fail:
            raise ValueError("chatty failed")
        _finish(self)


class ChattyGate(queued.Job):
    """Logs through logging, then runs until the gate ``tag`` opens (jobs at once in lanes)."""

    def perform(self, tag):
        import logging
        logging.getLogger("app.chatty").warning("waiting")
        _start(self)
        wait_gate(tag)
        _finish(self)


class RenamesItself(queued.Job):
    """Changes its payload's jid as it runs (as a careless job or middleware might)."""

    def perform(self):
        _start(self)
        self.msg["jid"] = "renamed-by-the-job"
        _finish(self)


class Releases(queued.Job):
    """Releases itself on its first ``times`` runs (``delay`` seconds each), then finishes."""
    queued_options = {"retry": 3}

    def perform(self, delay=0, times=1):
        _start(self)
        _r().rpush(MSGS, __import__("json").dumps(self.msg))
        if int(_r().hget(RUNS, self.jid)) <= times:
            self.release(delay)
        _finish(self)


class Buries(queued.Job):
    def perform(self, reason="not today"):
        _start(self)
        try:
            self.bury(reason)
        except Exception:  # noqa: BLE001 - bury must not be caught by this
            _r().rpush("t:caught", self.jid)
        _finish(self)


class Touches(queued.Job):
    """Runs ``seconds``, touching its lease every ``every`` seconds (or never: every=0)."""

    def perform(self, seconds, every):
        _start(self)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(every or seconds, max(0.0, end - time.monotonic())))
            if every:
                _r().rpush("t:touched", "1" if self.touch() else "0")
        _finish(self)
