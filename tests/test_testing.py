"""queued.testing: fake, inline and disable, with no Redis touched in the two test modes.

The default client points at a port where nothing listens (``no_redis``): any command a test
mode sent to Redis would fail the test with a ConnectionError.
"""
import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

import queued
import queued.client as client_mod
import queued.testing
from queued.errors import JobArgumentsError, UnknownJobClass
from conftest import ROOT, free_port

CALLS = []


class TTMailer(queued.Job):
    queued_options = {"queue": "mail", "retry": 3}

    def perform(self, to, body=None):
        CALLS.append(("TTMailer", self.jid, self.queue, to, body))
        if to == "boom":
            raise ValueError(f"cannot mail {to}")


class TTChain(queued.Job):
    """Pushes a TTMailer job from inside its own run."""

    def perform(self, n):
        CALLS.append(("TTChain", n))
        TTMailer.perform_async(f"from chain {n}")


class TTAsync(queued.Job):
    async def perform(self, n):
        await asyncio.sleep(0)
        CALLS.append(("TTAsync", n, asyncio.get_running_loop() is not None))


class TTShape(queued.Job):
    def perform(self, value):
        CALLS.append(("TTShape", value))


class TTOps(queued.Job):
    def perform(self, what):
        CALLS.append(("TTOps", what, self.msg.get("release_count")))
        if what == "release":
            self.release(0 if not self.msg.get("release_count") else 60)
        if what == "bury":
            self.bury("not worth it")
        assert self.touch() is True


@queued.job(queue="fn")
def tt_function(x):
    CALLS.append(("tt_function", x))


@pytest.fixture
def no_redis(monkeypatch):
    """The default client on a port nobody listens on; fake mode cleared before and after."""
    monkeypatch.setattr(client_mod, "_default", None)
    client_mod.configure(url=f"redis://127.0.0.1:{free_port()}/0")
    CALLS.clear()
    queued.testing.clear_all()
    yield
    queued.testing.clear_all()
    client_mod.testing = None


@pytest.fixture
def fake(no_redis):
    with queued.testing.fake():
        yield


@pytest.fixture
def inline(no_redis):
    with queued.testing.inline():
        yield


# --- the switch ----------------------------------------------------------------------------------

def test_modes_switch_for_the_process_and_with_blocks_put_the_previous_one_back(no_redis):
    assert queued.testing.mode() == "disable"
    queued.testing.fake()
    assert queued.testing.mode() == "fake"
    with queued.testing.inline():
        assert queued.testing.mode() == "inline"
        with queued.testing.disable():
            assert queued.testing.mode() == "disable"
        assert queued.testing.mode() == "inline"
    assert queued.testing.mode() == "fake"
    queued.testing.disable()
    assert queued.testing.mode() == "disable"


def test_disable_pushes_to_redis_again(default_client, r):
    with queued.testing.fake():
        TTShape.perform_async(1)
    jid = TTShape.perform_async(2)
    assert [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)] == [jid]
    assert [j["args"] for j in TTShape.jobs] == [[1]]
    TTShape.clear()


# --- fake -----------------------------------------------------------------------------------------

def test_fake_lists_each_push_as_its_payload_without_running_it(fake):
    before = time.time()
    jid = TTMailer.perform_async("ann", {"subject": "hi"})
    other = TTMailer.set(queue="urgent").perform_async("bob")
    assert CALLS == []
    first, second = TTMailer.jobs
    assert list(first) == ["retry", "queue", "args", "class", "jid", "created_at", "enqueued_at"]
    assert (first["class"], first["args"], first["jid"], first["queue"], first["retry"]) == (
        "TTMailer", ["ann", {"subject": "hi"}], jid, "mail", 3)
    assert before <= first["created_at"] <= first["enqueued_at"] <= time.time()
    assert (second["jid"], second["queue"]) == (other, "urgent")
    assert queued.testing.jobs("urgent") == [second]
    assert tt_function.jobs == []


def test_drain_runs_the_jobs_in_order_with_their_ids_and_empties_the_list(fake):
    jids = [TTMailer.perform_async(name) for name in ("ann", "bob")]
    assert TTMailer.drain() == 2
    assert CALLS == [("TTMailer", jids[0], "mail", "ann", None),
                     ("TTMailer", jids[1], "mail", "bob", None)]
    assert TTMailer.jobs == []


def test_drain_raises_the_jobs_own_exception_and_a_later_drain_goes_on(fake):
    TTMailer.perform_async("boom")
    TTMailer.perform_async("cy")
    with pytest.raises(ValueError, match="^cannot mail boom$"):
        TTMailer.drain()
    assert [j["args"] for j in TTMailer.jobs] == [["cy"]]  # the failed one is off the list
    assert TTMailer.drain() == 1
    assert [c[3] for c in CALLS] == ["boom", "cy"]


def test_drain_runs_what_the_jobs_push_and_drain_all_runs_every_class(fake):
    TTChain.perform_async(1)
    tt_function.perform_async("f")
    assert TTChain.drain() == 1
    assert [j["args"] for j in TTMailer.jobs] == [["from chain 1"]]
    assert queued.testing.drain_all() == 2
    assert CALLS == [("TTChain", 1), ("tt_function", "f"),
                     ("TTMailer", CALLS[2][1], "mail", "from chain 1", None)]
    assert queued.testing.jobs() == []


def test_scheduled_jobs_are_listed_with_their_time_and_drain_until_runs_the_due_ones(fake):
    now = time.time()
    TTMailer.perform_in(3600, "later")
    TTMailer.perform_at(now - 5, "now")
    TTMailer.set(wait=60).perform_async("soon")
    later, at_once, soon = TTMailer.jobs
    assert "enqueued_at" not in later and abs(later["at"] - (now + 3600)) < 5
    assert "at" not in at_once and "enqueued_at" in at_once
    assert abs(soon["at"] - (now + 60)) < 5
    assert TTMailer.drain(until=time.time()) == 1
    assert [c[3] for c in CALLS] == ["now"]
    assert TTMailer.drain(until=now + 120) == 1
    assert [c[3] for c in CALLS] == ["now", "soon"]
    assert TTMailer.drain() == 1  # without until: every job, as Sidekiq's drain
    assert [c[3] for c in CALLS] == ["now", "soon", "later"]


def test_clear_and_clear_all_forget_the_jobs(fake):
    TTMailer.perform_async("a")
    tt_function.perform_async(1)
    TTMailer.clear()
    assert TTMailer.jobs == [] and len(tt_function.jobs) == 1
    queued.testing.clear_all()
    assert tt_function.jobs == [] and queued.testing.jobs() == []


def test_bulk_and_raw_pushes_are_listed_too(fake):
    jids = TTShape.perform_bulk([[1], [2], [3]])
    client_mod.default_client().push_raw("default", json.dumps(
        {"class": "TTShape", "args": [4], "jid": "f" * 24, "queue": "default"}))
    assert [(j["jid"], j["args"]) for j in TTShape.jobs] == [
        *zip(jids, [[1], [2], [3]]), ("f" * 24, [4])]
    TTShape.drain()
    assert CALLS == [("TTShape", n) for n in (1, 2, 3, 4)]


def test_a_job_of_no_registered_class_fails_its_drain(fake):
    client_mod.default_client().push({"class": "Billing::RubyJob", "args": [1]})
    with pytest.raises(UnknownJobClass, match="Billing::RubyJob"):
        queued.testing.drain_all()


def test_release_puts_the_job_back_once_per_drain_and_bury_sends_it_to_dead(fake):
    TTOps.perform_async("release")
    TTOps.perform_async("bury")
    assert TTOps.drain() == 2
    (again,) = TTOps.jobs  # released at once on its first run: back, not run twice
    assert again["release_count"] == 1 and "at" not in again
    assert TTOps.drain() == 1  # released again, now for 60 s
    (later,) = TTOps.jobs
    assert later["release_count"] == 2 and later["at"] > time.time() + 50
    (buried,) = queued.testing.dead
    assert (buried["args"], buried["error_class"], buried["error_message"],
            buried["bury_count"]) == (["bury"], "Buried", "not worth it", 1)
    assert [c[1:] for c in CALLS] == [("release", None), ("bury", None), ("release", 1)]


# --- inline ---------------------------------------------------------------------------------------

def test_inline_runs_the_job_at_once_and_raises_its_exception(inline):
    jid = TTMailer.perform_async("ann")
    assert CALLS == [("TTMailer", jid, "mail", "ann", None)]
    with pytest.raises(ValueError, match="cannot mail boom"):
        TTMailer.perform_async("boom")
    TTMailer.perform_in(3600, "scheduled")  # at once too, as Sidekiq's inline
    assert [c[3] for c in CALLS] == ["ann", "boom", "scheduled"]
    assert TTMailer.jobs == []


@pytest.mark.parametrize("mode", ["fake", "inline"])
def test_arguments_json_would_change_are_refused_as_on_a_real_push(no_redis, mode):
    with getattr(queued.testing, mode)():
        with pytest.raises(JobArgumentsError, match=r"args\[0\]: \(1, 2\): a tuple"):
            TTShape.perform_async((1, 2))
        with pytest.raises(JobArgumentsError, match=r"a dict key 1 \(int\)"):
            TTShape.perform_async({1: "x"})
        previous = queued.strict_args("warn")
        try:
            with pytest.warns(queued.arguments.ArgumentsWarning):
                TTShape.perform_async({"t": (1, 2), 3: "x"})
            queued.testing.drain_all()
        finally:
            queued.strict_args(previous)
    # what the job got is what JSON gave back, as from Redis
    assert CALLS == [("TTShape", {"t": [1, 2], "3": "x"})]


# --- middleware, async ---------------------------------------------------------------------------

class Stamp:
    """Client middleware: stamps a payload key; cancels pushes of "cancel"."""

    def __call__(self, job, msg, queue, call_next):
        if msg["args"] == ["cancel"]:
            return None
        msg["stamped"] = True
        return call_next()


class Around:
    def __call__(self, job, msg, queue, call_next):
        CALLS.append(("around:before", type(job).__name__, msg["stamped"], queue))
        result = call_next()
        CALLS.append(("around:after", msg["jid"] == job.jid))
        return result


@pytest.fixture
def middleware():
    queued.client_middleware.add(Stamp)
    queued.server_middleware.add(Around)
    yield
    queued.client_middleware.remove(Stamp)
    queued.server_middleware.remove(Around)


@pytest.mark.parametrize("mode", ["fake", "inline"])
def test_client_and_server_middleware_run_in_both_modes(no_redis, middleware, mode):
    with getattr(queued.testing, mode)():
        assert TTShape.perform_async("cancel") is None
        TTShape.perform_async("go")
        queued.testing.drain_all()
    assert CALLS == [("around:before", "TTShape", True, "default"), ("TTShape", "go"),
                     ("around:after", True)]
    assert TTShape.jobs == []


@pytest.mark.parametrize("mode", ["fake", "inline"])
def test_async_jobs_run_to_their_end(no_redis, mode):
    with getattr(queued.testing, mode)():
        TTAsync.perform_async(1)
        queued.testing.drain_all()

        async def inside_a_loop():  # an async test pushing (inline) or draining (fake)
            TTAsync.perform_async(2)
            queued.testing.drain_all()
        asyncio.run(inside_a_loop())
    assert CALLS == [("TTAsync", 1, True), ("TTAsync", 2, True)]


# --- tasks ----------------------------------------------------------------------------------------

class TTRegister(queued.Job):
    def perform(self, sku):
        self.say(f"checking {sku}")
        CALLS.append(("TTRegister", sku, self.task_id))
        if sku == "cheap":
            raise queued.JobFailed("below cost")


class TTDone(queued.Job):
    def perform(self, task_id, summary):
        CALLS.append(("TTDone", task_id, summary))


class TTAllGood(queued.Job):
    def perform(self, task_id, summary):
        CALLS.append(("TTAllGood", task_id))


def test_a_task_in_fake_mode_keeps_its_jobs_states_and_pushes_its_callback_once(fake):
    task = queued.Task("promo", on_complete=TTDone, on_success=TTAllGood)
    with task:
        TTRegister.perform_bulk([["a"], ["cheap"], ["b"]])
        assert TTRegister.jobs == []  # written when the block ends, as in Redis
    assert [j["task_id"] for j in TTRegister.jobs] == [task.id] * 3
    found = queued.Task.find(task.id)
    assert found.progress() == {"total": 3, "enqueued": 3, "working": 0, "finished": 0,
                                "failed": 0, "error": 0, "retrying": 0, "complete": False,
                                "success": False, "sealed": True}
    with pytest.raises(queued.JobFailed, match="below cost"):
        queued.testing.drain_all()
    assert TTDone.jobs == []  # one job still enqueued: not complete
    queued.testing.drain_all()
    assert found.progress()["complete"] and not found.progress()["success"]
    (done,) = [c for c in CALLS if c[0] == "TTDone"]
    assert done[1:] == (task.id, {"task_id": task.id, "description": "promo", "total": 3,
                                  "finished": 2, "failed": 1, "error": 0, "complete": True,
                                  "success": False})
    assert not [c for c in CALLS if c[0] == "TTAllGood"]
    (failed,) = found.jobs("failed")
    assert (failed["args"], failed["error"]["message"],
            [m["text"] for m in failed["messages"]]) == (["cheap"], "below cost",
                                                        ["checking cheap"])
    assert sorted(j["args"][0] for j in found.jobs("finished")) == ["a", "b"]
    assert queued.testing.drain_all() == 0  # the callback ran once


def test_a_task_block_that_raises_pushes_nothing_and_an_inline_task_completes_at_once(no_redis):
    with queued.testing.fake():
        task = queued.Task("broken")
        with pytest.raises(RuntimeError):
            with task:
                TTRegister.perform_async("x")
                raise RuntimeError("stop")
        assert TTRegister.jobs == [] and queued.Task.find(task.id) is None
    with queued.testing.inline():
        task = queued.Task("inline", on_success=TTAllGood)
        with task:
            TTRegister.perform_async("y")
        assert queued.Task.find(task.id).progress()["success"]
    assert [c[0] for c in CALLS] == ["TTRegister", "TTAllGood"]


class TTErrs(queued.Job):
    def perform(self, sku):
        CALLS.append(("TTErrs", sku))
        if sku.startswith("bad"):
            raise KeyError(sku)


def test_an_inline_task_runs_every_job_when_one_fails_and_its_callback_then_raises_the_first(
        no_redis):
    # (before, the 2nd job's error left the block at once: the 3rd never ran, the task was
    # never sealed, on_complete never ran: red team rt3 #6)
    queued.testing.inline()
    task = queued.Task("import", on_complete=TTDone, on_success=TTAllGood)
    with pytest.raises(KeyError, match="bad-2"):
        with task:
            TTErrs.perform_bulk([["row-1"], ["bad-2"], ["row-3"], ["bad-4"]])
    # Then every job ran, each error is final in the task, and on_complete ran (not
    # on_success), before the first job's error came out of the block
    assert [c[:2] for c in CALLS] == [("TTErrs", "row-1"), ("TTErrs", "bad-2"),
                                      ("TTErrs", "row-3"), ("TTErrs", "bad-4"),
                                      ("TTDone", task.id)]
    progress = queued.Task.find(task.id).progress()
    assert (progress["total"], progress["finished"], progress["error"], progress["complete"],
            progress["success"]) == (4, 2, 2, True, False)
    assert sorted(j["args"][0] for j in task.jobs("error")) == ["bad-2", "bad-4"]


def test_an_inline_bulk_push_runs_every_job_and_raises_the_first_error(inline):
    with pytest.raises(KeyError, match="bad-1"):
        TTErrs.perform_bulk([["bad-1"], ["row-2"], ["bad-3"]])
    assert [c[1] for c in CALLS] == ["bad-1", "row-2", "bad-3"]


class TTExpiring(queued.Job):
    queued_options = {"expires_in": 60}

    @classmethod
    def on_expired(cls, msg):
        CALLS.append(("expired", msg["args"][0]))

    def perform(self, n):
        CALLS.append(("TTExpiring", n))


def test_fake_and_inline_modes_never_run_an_expired_job(no_redis, monkeypatch):
    # (drain() and inline pushes ran jobs past their expires_at: red team rt3 #7)
    queued.testing.fake()
    task = queued.Task("late")
    with task:
        TTExpiring.perform_async(1)
    TTExpiring.perform_async(2)
    TTExpiring.set(expires_in=3600).perform_async(3)
    # When the drain comes after the deadline of the first two
    later = time.time() + 120
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: later)
        assert TTExpiring.drain() == 1  # (only the one still in time ran)
    # Then they were not run: their on_expired ran, they are listed as expired, and the
    # task's job is a final error (class Expired), so the task is complete
    assert CALLS == [("expired", 1), ("expired", 2), ("TTExpiring", 3)]
    assert [m["args"] for m in queued.testing.expired] == [[1], [2]]
    (record,) = task.jobs("error")
    assert (record["args"], record["error"]["class"]) == ([1], "Expired")
    assert queued.Task.find(task.id).progress()["complete"]
    # And an inline push of a job already past its expires_at (another producer's payload)
    CALLS.clear()
    queued.testing.inline()
    client_mod.default_client().push({"class": "TTExpiring", "args": [4],
                                      "expires_at": time.time() - 100})
    TTExpiring.perform_async(5)
    assert CALLS == [("expired", 4), ("TTExpiring", 5)]
    queued.testing.clear_all()
    assert queued.testing.expired == []


# --- periodic jobs -------------------------------------------------------------------------------

class TTNightly(queued.Job):
    def perform(self, what):
        CALLS.append(("TTNightly", what, self.msg["cron_name"]))


class TTOff(queued.Job):
    def perform(self):
        CALLS.append(("TTOff",))


@pytest.fixture
def schedules():
    """Two @queued.periodic declarations, for this test only (the registry is the process's:
    tests/test_periodic.py's masters would push them too)."""
    from queued.periodic import declared
    saved = dict(declared)
    queued.periodic("0 3 * * *", name="tt-nightly", args=["nightly"])(TTNightly)
    queued.periodic(every="1h", name="tt-off", enabled=False)(TTOff)
    yield
    declared.clear()
    declared.update(saved)


def test_tick_pushes_what_a_periodic_schedule_pushes(fake, schedules):
    jid = queued.testing.tick("tt-nightly")
    (job,) = TTNightly.jobs
    assert (job["jid"], job["args"], job["cron_name"]) == (jid, ["nightly"], "tt-nightly")
    assert job["cron_tick"] % 86400 == 3 * 3600 and job["cron_tick"] <= time.time()
    assert queued.testing.tick("tt-off") is None and TTOff.jobs == []
    TTNightly.drain()
    assert CALLS == [("TTNightly", "nightly", "tt-nightly")]
    with pytest.raises(LookupError, match="no @queued.periodic schedule named 'nope'"):
        queued.testing.tick("nope")
    with queued.testing.disable(), pytest.raises(RuntimeError, match="fake or inline"):
        queued.testing.tick("tt-nightly")


# --- the pytest fixtures --------------------------------------------------------------------------

def test_the_pytest_fixtures_put_a_test_in_a_mode_and_back(tmp_path):
    (tmp_path / "test_app.py").write_text('''
import queued, queued.testing

class PFJob(queued.Job):
    def perform(self, x):
        DONE.append(x)

DONE = []

def test_fake(queued_fake):
    PFJob.perform_async(1)
    assert [j["args"] for j in PFJob.jobs] == [[1]] and DONE == []
    queued_fake.drain_all()
    assert DONE == [1]

def test_left_nothing_behind():
    assert queued.testing.mode() == "disable" and PFJob.jobs == []

def test_inline(queued_inline):
    PFJob.perform_async(2)
    assert DONE == [1, 2]
''')
    env = {**os.environ, "PYTHONPATH": ROOT, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "queued.testing.pytest_plugin", "test_app.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
