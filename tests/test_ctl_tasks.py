"""``queuedctl tasks``, ``task ID`` (table, JSON, --watch, --seal) and ``new-task``, run as
real subprocesses against a real Redis; the jobs' moves are made with the scripts the daemon
calls (tracking.mark), as in tests/test_task.py. (Run by a real daemon and pushed from Ruby:
tests/interop/test_task_sidekiq.py.)"""
from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys

import queued
from queued import tracking
from queued.keys import Keys
from queued.task import Task
from queued.tracking import Move

from ctlrun import ctl, ctl_env, ctl_json, ok, rows
from harness import ROOT, Monitor, wait_for

KEYS = Keys()


class Signup(queued.Job):
    def perform(self, product):
        pass


def move(r, task, jid, state, error=""):
    assert tracking.mark(r, KEYS, Move(task.id, jid, state, error))


def a_task(r, description="promo 42"):
    """A sealed task of 4 jobs: one finished, one failed (JobFailed), one error waiting for
    its retry (with a message), one still enqueued; (task, [jids])."""
    task = Task(description)
    with task:
        jids = Signup.perform_bulk([[i] for i in range(4)])
    move(r, task, jids[0], "finished")
    move(r, task, jids[1], "failed",
         tracking.error_json("JobFailed", "price below cost <b>", final=True))
    move(r, task, jids[2], "retry",
         tracking.error_json("TimeoutError", "shop API timed out", final=False, retry_count=0))
    tracking.TASK_SAY(r, *tracking.say_call(KEYS, task.id, jids[2], "tried the shop API"))
    return task, jids


def test_task_as_json_has_its_progress_and_failures(producer, r, redis_url):
    task, jids = a_task(r)
    doc = ctl_json("task", task.id, url=redis_url)
    assert doc["progress"] == {"total": 4, "enqueued": 1, "working": 0, "finished": 1,
                               "failed": 1, "error": 1, "retrying": 1, "complete": False,
                               "success": False, "sealed": True}
    assert (doc["id"], doc["description"], doc["state"]) == (task.id, "promo 42", "running")
    assert {f["jid"]: (f["status"], f["retrying"], f["error"]["message"])
            for f in doc["failures"]} == {
        jids[1]: ("failed", False, "price below cost <b>"),
        jids[2]: ("error", True, "shop API timed out")}


def test_task_as_a_table_shows_the_bar_counts_and_failures(producer, r, redis_url):
    task, jids = a_task(r)
    said = ok("task", task.id, url=redis_url)
    assert f"task {task.id}  promo 42" in said
    # 2 of 4 final: the finished one and the business failure (the error waits for a retry)
    assert "2/4 final  50 %  running" in said
    table = rows(said)
    assert ["1", "0", "1", "1", "1", "1"] in table  # enqueued working finished failed error
    failures = {row[0]: row[1:] for row in table if row and row[0] in jids}
    assert failures[jids[1]][:3] == ["Signup", "failed", "JobFailed: price below cost <b>"]
    assert failures[jids[2]] == ["Signup", "error (retrying)",
                                 "TimeoutError: shop API timed out", "tried the shop API"]


def test_tasks_lists_the_newest_first(producer, r, redis_url):
    first, _ = a_task(r, "first")
    second = Task("second")
    with second:
        Signup.perform_async(1)
    listed = ctl_json("tasks", url=redis_url)
    assert [t["id"] for t in listed] == [second.id, first.id]
    assert listed[1]["progress"]["total"] == 4 and listed[0]["state"] == "running"
    table = rows(ok("tasks", url=redis_url))
    assert [row[0] for row in table] == [second.id, first.id]


def test_new_task_then_seal_with_a_total(producer, r, redis_url):
    tid = ok("new-task", "import 42", "--on-complete", "ImportDone", url=redis_url).strip()
    doc = ctl_json("task", tid, url=redis_url)
    assert (doc["sealed"], doc["state"], doc["expected"]) == (False, "open (not sealed)", None)
    assert ok("task", tid, "--seal", "--total", "2", url=redis_url) == \
        f"sealed task {tid} (total 2)\n"
    doc = ctl_json("task", tid, url=redis_url)
    assert (doc["sealed"], doc["expected"], doc["progress"]["complete"]) == (True, 2, False)


def test_an_unknown_task_is_exit_1_and_one_line(redis_url):
    proc = ctl("task", "nosuchtask", url=redis_url)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("queuedctl: no task nosuchtask on ")
    assert len(proc.stderr.splitlines()) == 1


def watch(task_id, url) -> subprocess.Popen:
    argv = [sys.executable, "-m", "queued.admin.ctl", "--redis", url, "task", task_id,
            "--watch", "--json"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ctl_env(), cwd=ROOT)


def looked(monitor: Monitor, task: Task) -> int:
    """How many times a client has read whether ``task`` is complete (Task.progress's HMGET of
    its hash: what ``--watch`` does on each turn of its loop)."""
    read = f"HMGET {KEYS.task(task.id)} sealed completed_at succeeded_at"
    return sum(1 for addr, cmd in monitor.commands()
               if not addr.startswith("lua") and cmd == read)


def test_watch_waits_for_the_end_and_its_status_says_how_it_ended(producer, r, redis_url):
    # Given two tasks of two jobs each, watched, each watch having looked at its task once
    # (so it saw it running: the jobs ended after that, and only its loop can see them end)
    good, bad = Task("good"), Task("bad")
    with good:
        g = Signup.perform_bulk([[1], [2]])
    with bad:
        b = Signup.perform_bulk([[1], [2]])
    monitor = Monitor(redis_url)
    try:
        watchers = {good.id: watch(good.id, redis_url), bad.id: watch(bad.id, redis_url)}
        wait_for(lambda: looked(monitor, good) and looked(monitor, bad), 60,
                 what="both watches to look at their tasks")
        # When every job ends: all finished in one, one dead in the other
        for jid in g:
            move(r, good, jid, "finished")
        move(r, bad, b[0], "finished")
        move(r, bad, b[1], "error", tracking.error_json("RuntimeError", "boom", final=True))
        # Then each watch returns: 0 for the success, 1 for the one with an error
        docs = {}
        for tid, proc in watchers.items():
            stdout, stderr = proc.communicate(timeout=60)
            docs[tid] = (proc.returncode, json.loads(stdout)["progress"]["finished"], stderr)
        assert docs == {good.id: (0, 2, ""), bad.id: (1, 1, "")}
    finally:
        monitor.close()


class OnTerminal:
    """queuedctl with stdin, stdout and stderr on a pseudo-terminal, read while it runs."""

    def __init__(self, args, url):
        self.fd, slave = pty.openpty()
        argv = [sys.executable, "-m", "queued.admin.ctl", "--redis", url, *args]
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                     env=ctl_env(), cwd=ROOT)
        os.close(slave)
        self.seen = b""

    def text(self) -> str:
        """Everything written so far, without the terminal's colours and cursor moves."""
        while select.select([self.fd], [], [], 0.02)[0]:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            if not chunk:
                break
            self.seen += chunk
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.seen.decode("utf-8", "replace"))

    def finish(self, timeout=60) -> tuple[int, str]:
        status = self.proc.wait(timeout)
        said = self.text()
        os.close(self.fd)
        return status, said


def test_watch_on_a_terminal_draws_a_bar_that_reaches_100_percent(producer, r, redis_url):
    # Given a task of three jobs, one finished, watched on a terminal
    task = Task("shown")
    with task:
        jids = Signup.perform_bulk([[i] for i in range(3)])
    move(r, task, jids[0], "finished")
    term = OnTerminal(["task", task.id, "--watch"], redis_url)
    try:
        # Then the bar shows one of three
        wait_for(lambda: "1/3 final  33 %  running" in term.text(), 60, what="the bar at 1/3")
        # When the other two finish, it redraws the bar at 100 % and returns 0
        for jid in jids[1:]:
            move(r, task, jid, "finished")
        status, said = term.finish()
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait()
    assert status == 0
    assert "3/3 final  100 %  succeeded" in said.split("1/3 final  33 %  running", 1)[1]
