"""Job classes for the task tests that run real daemons (tests/integration/test_tasks.py).

Each job counts its runs by jid under ``t:`` keys; callbacks append what they were given."""
import json
import os
import signal
import time

import queued

RUNS = "t:task:runs"            # hash jid -> times perform started
CALLBACKS = "t:task:callbacks"  # list of JSON [kind, task_id, summary], one per callback run


def _run(job) -> int:
    return queued.get_redis().hincrby(RUNS, job.jid, 1)


class Soon(queued.Job):
    """Retries after 1 s plus Sidekiq's jitter (up to 9 s more for a first retry), not
    Sidekiq's 15 s and more."""
    queued_options = {"abstract": True}

    @classmethod
    def retry_in(cls, count, exc):
        return 1


class TOk(queued.Job):
    def perform(self, i, pause=0.0):
        _run(self)
        self.say(f"ok {i}")
        if pause:
            time.sleep(pause)


class TBusiness(queued.Job):
    def perform(self, i, pause=0.0):
        _run(self)
        raise queued.JobFailed(f"product {i} rejected: price below cost")


class TFlaky(Soon):
    queued_options = {"retry": 3}

    def perform(self, i, pause=0.0):
        _run(self)
        if pause:
            time.sleep(pause)
        if self.msg.get("retry_count") is None:
            raise RuntimeError(f"flaky {i}: first run fails")
        self.say("worked on the retry")


class TDoomed(Soon):
    queued_options = {"retry": 1}

    def perform(self, i, pause=0.0):
        _run(self)
        raise ValueError(f"doomed {i}")


class TParent(queued.Job):
    """Adds three jobs to its own task, then ends."""

    def perform(self, i):
        _run(self)
        with self.task:
            TOk.perform_bulk([[i * 10 + k] for k in range(3)])


class TKillsOnce(queued.Job):
    """Kills its worker on its first run, then succeeds."""

    def perform(self, i):
        if _run(self) == 1:
            os.kill(os.getpid(), signal.SIGKILL)


class TStuck(queued.Job):
    """Ignores its timeout: the master kills its worker at timeout + grace."""
    queued_options = {"timeout": 1, "retry": False}

    def perform(self, i):
        _run(self)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                time.sleep(0.05)
            except BaseException:  # noqa: BLE001 - swallowing JobTimeout is the point
                pass


class TComplete(queued.Job):
    def perform(self, task_id, summary):
        queued.get_redis().rpush(CALLBACKS, json.dumps(["complete", task_id, summary]))


class TSuccess(queued.Job):
    def perform(self, task_id, summary):
        queued.get_redis().rpush(CALLBACKS, json.dumps(["success", task_id, summary]))


class TRelease(queued.Job):
    """Releases itself on its first run (back to its queue), succeeds on the second."""

    def perform(self, i):
        if _run(self) == 1:
            self.release()


class TBury(queued.Job):
    def perform(self, i):
        _run(self)
        self.bury("no stock")
