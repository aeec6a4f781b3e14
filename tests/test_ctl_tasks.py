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
import time

import queued
from queued import tracking
from queued.keys import Keys
from queued.task import Task
from queued.tracking import Move

from ctlrun import box_rows, ctl, ctl_env, ctl_json, ok, rows
from harness import ROOT, Monitor, wait_for
from test_ctl import in_terminal

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


def test_task_off_a_terminal_and_on_one(producer, r, redis_url):
    task, jids = a_task(r)
    said = ok("task", task.id, url=redis_url)
    head, failures = said.split("\n\n")
    # 2 of 4 final: the finished one and the business failure (the error waits for a retry)
    assert [re.split(r"\s{2,}", line) for line in head.splitlines()][:10] == [
        ["task", task.id], ["description", "promo 42"], ["state", "running"],
        ["progress", "2/4 final (50 %)"], ["enqueued", "1"], ["working", "0"],
        ["finished", "1"], ["failed", "1"], ["retrying", "1"], ["error", "0"]]
    table = {row[0]: row[1:] for row in rows(failures)}
    assert table == {
        jids[1]: ["Signup", "failed", "JobFailed: price below cost <b>", ""],
        jids[2]: ["Signup", "error (retrying)", "TimeoutError: shop API timed out",
                  "tried the shop API"]}
    # On a terminal: the bar, the same counts, the failures
    status, drawn = in_terminal(["task", task.id], b"", redis_url)
    assert status == 0 and f"task {task.id}  promo 42" in drawn
    assert "2/4 final  50 %  running" in drawn
    assert ["1", "0", "1", "1", "1", "0"] in box_rows(drawn)
    assert [jids[1], "Signup", "failed", "JobFailed: price below cost <b>", ""] in \
        box_rows(drawn)


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


#: A progress line of ``task --watch`` off a terminal.
LINE = re.compile(r"^(?P<time>\d\d:\d\d:\d\dZ) (?P<state>[a-z ,()]+): (?P<final>[\d,]+)/"
                  r"(?P<total>[\d,]+) final \((?P<percent>\d+) %\): (?P<counts>[^;]+); "
                  r"(?P<pace>.*)$")


def watch(task_id, url, *extra) -> subprocess.Popen:
    argv = [sys.executable, "-m", "queued.admin.ctl", "--redis", url, "task", task_id,
            "--watch", *(extra or ("--json",))]
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
    finally:
        monitor.close()
    # When every job ends: all finished in one, one dead in the other
    for jid in g:
        move(r, good, jid, "finished")
    move(r, bad, b[0], "finished")
    move(r, bad, b[1], "error", tracking.error_json("RuntimeError", "boom", final=True))
    # Then each watch returns: 0 for the success, 1 for the one with an error, its one JSON
    # document on stdout, its progress lines on stderr (the last one: how it ended)
    docs = {}
    for tid, proc in watchers.items():
        stdout, stderr = proc.communicate(timeout=60)
        lines = [LINE.match(line) for line in stderr.splitlines()]
        assert lines and all(lines), stderr
        docs[tid] = (proc.returncode, json.loads(stdout)["progress"]["finished"],
                     lines[-1]["state"], lines[-1]["final"])
    assert docs == {good.id: (0, 2, "succeeded", "2"),
                    bad.id: (1, 1, "complete, with failures", "2")}


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


class Lines:
    """The lines a running process writes on stdout, read as they come (a thread)."""

    def __init__(self, proc: subprocess.Popen):
        import threading
        self.proc, self.lines = proc, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def progress(self) -> list[re.Match]:
        return [m for m in map(LINE.match, list(self.lines)) if m]


def test_watch_off_a_terminal_prints_progress_lines_with_pace_and_next_retry(producer, r,
                                                                            redis_url):
    # Given a sealed task of 4 jobs, watched from a deploy script (stdout a pipe)
    task = Task("deploy 7")
    with task:
        jids = Signup.perform_bulk([[i] for i in range(4)])
    proc = watch(task.id, redis_url, "--every", "0.5")
    out = Lines(proc)
    try:
        # Then a first line at once: nothing final yet, no pace yet
        wait_for(lambda: out.progress(), 20, what="the first progress line")
        first = out.progress()[0]
        assert (first["state"], first["final"], first["total"], first["percent"]) == (
            "running", "0", "4", "0")
        assert first["counts"] == ("4 enqueued, 0 working, 0 finished, 0 failed, "
                                   "0 retrying, 0 error")
        assert first["pace"] == "rate -, ETA -"
        # When one job finishes and one fails and waits in retry (as the daemon leaves it)
        due = time.time() + 600
        move(r, task, jids[0], "finished")
        move(r, task, jids[1], "retry",
             tracking.error_json("TimeoutError", "shop API timed out", final=False,
                                 retry_count=0))
        payload = json.loads(r.lrange("queue:default", 0, -1)[2])
        assert payload["jid"] == jids[1]
        r.zadd("retry", {json.dumps({**payload, "retry_count": 0}): due})
        # Then, at its interval, a line with the pace, the ETA and when the retry is due
        wait_for(lambda: any("next retry" in m["pace"] for m in out.progress()), 20,
                 what="a line with the next retry")
        line = next(m for m in out.progress() if "next retry" in m["pace"])
        assert (line["final"], line["percent"]) == ("1", "25")
        assert line["counts"] == ("2 enqueued, 0 working, 1 finished, 0 failed, "
                                  "1 retrying, 0 error")
        pace = re.fullmatch(r"(?P<rate>[\d.]+) jobs/s, ETA (?P<eta>.+); next retry in "
                            r"(?P<in>\d+m) \((?P<at>[-\dT:Z]+)\)", line["pace"])
        assert pace and pace["at"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(due))
        assert pace["in"] in ("9m", "10m") and float(pace["rate"]) > 0
        # (lines keep coming at the interval while nothing changes)
        seen = len(out.progress())
        wait_for(lambda: len(out.progress()) >= seen + 2, 20, what="two more lines")
        # When the retry and the others finish
        r.delete("retry")
        for jid in (jids[1], jids[2], jids[3]):
            move(r, task, jid, "finished")
        # Then the last line says so, the whole task follows, exit 0
        assert proc.wait(30) == 0
        out.thread.join(10)
        last = out.progress()[-1]
        assert (last["state"], last["final"], last["percent"]) == ("succeeded", "4", "100")
        assert "next retry" not in last["pace"]
        assert f"task         {task.id}" in out.lines
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_cli_and_the_dashboard_show_the_same_numbers(producer, r, redis_url):
    from starlette.testclient import TestClient
    from queued.admin.web import create_app
    # Given a task of 200 jobs: 195 finished, 1 failed, 2 errors waiting for a retry, 1
    # final error, 1 still enqueued (99.5 % final: 99 %, never a rounded-up 100 %)
    task = Task("two hundred")
    with task:
        jids = Signup.perform_bulk([[i] for i in range(200)])
    for jid in jids[:195]:
        move(r, task, jid, "finished")
    move(r, task, jids[195], "failed", tracking.error_json("JobFailed", "no", final=True))
    for jid in jids[196:198]:
        move(r, task, jid, "retry", tracking.error_json("E", "again", final=False))
    move(r, task, jids[198], "error", tracking.error_json("E", "dead", final=True))
    # The CLI
    s = ctl_json("task", task.id, url=redis_url)["summary"]
    assert s == {"total": 200, "enqueued": 1, "working": 0, "finished": 195, "failed": 1,
                 "retrying": 2, "error": 1, "final": 197, "percent": 98,
                 "state": "running", "complete": False, "success": False, "sealed": True}
    (listed,) = rows(ok("tasks", url=redis_url))
    assert listed[3:9] == ["200", "195", "1", "2", "1", "98 %"]
    # The dashboard's list and the task's page
    with TestClient(create_app(r), base_url="http://localhost") as web:
        page = web.get("/tasks").text
        row = re.search(rf'<tr data-task="{task.id}">(.*?)</tr>', page, re.S).group(1)
        cells = [re.sub(r"<[^>]+>", "", c).strip()
                 for c in re.findall(r'<td class="num">(.*?)</td>', row, re.S)]
        assert cells == ["200", "1", "0", "195", "1", "2", "1"]
        assert 'data-percent="98"' in row
        page = web.get(f"/tasks/{task.id}").text
        tabs = dict(re.findall(r">(\w+) <b>([\d,]+)</b></a>", page))
        assert tabs == {"enqueued": "1", "working": "0", "finished": "195", "failed": "1",
                        "retry": "2", "error": "1"}
        assert 'data-percent="98"' in page and "(197 of 200 jobs final)" in page
    # And with 199 of 200 final: 99 % everywhere (the CLI rounded it up to 100 %)
    for jid in jids[196:198]:
        move(r, task, jid, "finished")
    assert ctl_json("task", task.id, url=redis_url)["summary"]["percent"] == 99
    with TestClient(create_app(r), base_url="http://localhost") as web:
        assert 'data-percent="99"' in web.get(f"/tasks/{task.id}").text
    status, drawn = in_terminal(["task", task.id], b"", redis_url)
    assert "199/200 final  99 %  running" in drawn


def test_a_rails_job_of_a_task_shows_under_its_own_class(producer, r, redis_url):
    # Given a task whose job was pushed by Rails (ActiveJob's wrapper), failed for good
    task = Task("rails")
    task.create()
    jid = "a" * 24
    record = tracking.record_json({"class": "ActiveJob::QueueAdapters::SidekiqAdapter::"
                                            "JobWrapper", "wrapped": "ReportJob",
                                   "args": [{"job_class": "ReportJob"}]}, "default")
    assert tracking.mark(r, KEYS, Move(task.id, jid, "failed", tracking.error_json(
        "JobFailed", "no", final=True)), record)
    # Then the CLI (and queued.Task) name it by its class, not Rails' wrapper
    (failure,) = ctl_json("task", task.id, url=redis_url)["failures"]
    assert failure["class"] == "ReportJob"
    assert task.job(jid)["class"] == "ReportJob"
