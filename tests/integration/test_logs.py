"""What the daemon's log tells an operator: every line in Sidekiq's shape with its logger, a
job's lines with its class and jid, failures with the job's own frames and what happens next,
kills with their real cause, timeouts with where the job was; the title and reopening the file.
"""
import json
import re
import signal

import jobs
import pytest
from ackjobs import Step, reserved_jids

from harness import counts, title, wait_for

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z pid=\d+ tid=(master|w\d+)"
                  r"( class=\S+ jid=\w+( elapsed=[\d.]+)?)? (DEBUG|INFO|WARNING|ERROR) "
                  r"[\w.]+: ")


def records(out: str) -> list[str]:
    """The first line of every record (continuation lines of a traceback or stack aside)."""
    return [x for x in out.splitlines() if LINE.match(x)]


def test_a_jobs_own_lines_carry_its_class_and_jid_and_a_failure_says_what_comes_next(
        daemon, producer, r):
    d = daemon(concurrency=1)
    ok = jobs.Chatty.perform_async()
    bad = jobs.Chatty.perform_async(True)
    wait_for(lambda: r.zcard("retry") == 1, what="the failure in retry")
    out = d.output()
    # Every line has the shape, with its logger's name
    assert all(LINE.match(x) or not x[:4].isdigit() for x in out.splitlines())
    # The job's own logging carries its class and jid; its end says done with elapsed
    for jid in (ok, bad):
        assert any(f" class=Chatty jid={jid} WARNING app.chatty: working on it" in x
                   for x in out.splitlines())
    assert re.search(rf" class=Chatty jid={ok} elapsed=[\d.]+ INFO queued.worker: done$",
                     out, re.M)
    # The failure says the attempt, the limit and when (UTC, like the timestamps)
    (fail,) = [x for x in records(out) if f"jid={bad}" in x and "fail:" in x]
    assert re.search(r"WARNING queued.worker: fail: ValueError: chatty failed -> retry 1/3 at "
                     r"(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\dZ$", fail), fail
    # And its traceback starts in the job's own code, not in queued's
    trace = out[out.index(fail):].split("\n20")[0]
    frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', trace)
    assert frames[0][1] == "perform" and frames[0][0].endswith("jobs.py"), frames
    assert not any("/queued/" in f for f, _ in frames)
    assert d.stop() == 0


def test_a_done_line_names_the_class_to_show_and_runs_the_class_named(daemon, producer, r):
    # (display_class, as Sidekiq's ActiveJob payloads carry: the line shows it, the worker
    # runs "class")
    d = daemon(concurrency=1)
    jid = "d15c1a55d15c1a55d15c1a55"
    r.lpush("queue:default", json.dumps({
        "class": "Chatty", "display_class": "Shown::Name", "args": [], "jid": jid,
        "queue": "default", "retry": 3, "created_at": 1.7e9, "enqueued_at": 1.7e9}))
    out = d.wait_log(f" class=Shown::Name jid={jid} elapsed=")
    (line,) = [x for x in out.splitlines() if f"jid={jid} elapsed=" in x]
    assert line.endswith(" INFO queued.worker: done")
    assert f" class=Shown::Name jid={jid} WARNING app.chatty: working on it" in out


def test_the_done_lines_held_are_written_before_the_worker_waits_for_more(
        daemon, producer, r):
    # Given 40 quick jobs queued before a worker of one job at a time starts (it runs them in
    # batches, and holds their done lines until a batch ends)
    jids = jobs.Record.perform_bulk([[] for _ in range(40)])
    d = daemon(concurrency=1)
    # When it has run them all and waits in Redis for more
    wait_for(lambda: len(counts(r, jobs.DONE)) == 40, 10, what="every job done")
    wait_for(lambda: d.blocked_workers(), 10, what="the worker waiting for work")
    # Then every job's done line is in the log already (none held while it waits)
    done = re.findall(r" class=Record jid=(\w+) elapsed=[\d.]+ INFO queued.worker: done$",
                      d.output(), re.M)
    assert sorted(done) == sorted(jids)


@pytest.mark.parametrize("seconds", [0.0, 0.002], ids=["acked-as-batches-end",
                                                      "acked-every-20-ms-in-a-batch"])
def test_every_job_whose_ack_went_out_has_its_done_line_written_while_a_later_one_runs(
        daemon, producer, r, seconds):
    # Given one worker whose batches grow however long its jobs take and none of whose jobs
    # counts as one that may run long (jobmods/long_batches.py), and 100 jobs of one class,
    # the 60th of which waits on a gate (RT9: a job of a class known to be short that turns
    # slow), 28 jobs into a batch of 32 (1+2+4+8+16 before it). Jobs of no time: the acks of
    # the batches before it went out with each next reserve call; of 2 ms: those of its own
    # batch also went out every 20 ms before it (~56 ms into the batch)
    jids = Step.perform_bulk([[i, "step" if i == 59 else None, seconds] for i in range(100)])
    d = daemon(require=("ackjobs.py", "jobmods/long_batches.py"), concurrency=1)
    # When the gated job runs
    wait_for(lambda: r.hexists(jobs.RUNS, jids[59]), 10, what="the gated job running")
    # Then each job before it that is no longer reserved (its ack went out) has its done
    # line in the log already: a kill -9 now would lose no line of a job it does not rerun
    reserved = set(reserved_jids(r))
    written = set(re.findall(r" class=Step jid=(\w+) elapsed=[\d.]+ INFO queued.worker: done$",
                             d.output(), re.M))
    acked = set(jids[:59]) - reserved
    assert acked and acked <= written, sorted(acked - written)
    jobs.open_gate(r, "step")
    wait_for(lambda: r.hlen(jobs.RUNS) == 100, 10, what="every job run")
    assert d.stop() == 0


def test_a_timeout_is_logged_with_where_the_job_was(daemon, producer, r):
    d = daemon(concurrency=1)
    jid = jobs.Timed.perform_async(5)
    wait_for(lambda: "fail: JobTimeout" in d.output(), 10, what="the timeout")
    out = d.output()
    (fail,) = [x for x in records(out) if f"jid={jid}" in x and "fail:" in x]
    trace = out[out.index(fail):].split("\n20")[0]
    frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', trace)
    # the job was sleeping in perform when SIGALRM came; the alarm handler's frame is gone
    assert frames[-1][1] == "perform" and frames[-1][0].endswith("jobs.py"), frames
    assert d.stop() == 0


def test_a_job_killed_past_its_timeout_leaves_its_stack_and_the_right_cause(
        daemon, producer, r):
    d = daemon(concurrency=1, timeout_grace=0.3)
    jid = jobs.BlockAlarm.perform_async(30)
    wait_for(lambda: r.zcard("dead") == 1, 10, what="the killed job in dead")
    out = wait_for(lambda: "job(s) put back" in d.output() and d.output(), 5, what="settled")
    # The master asked the worker for its stack before the kill: it shows the job blocked
    assert "asking it for its stack, then killing it" in out
    (stack,) = [x for x in records(out) if x.endswith("; stack:") and "tid=w0" in x]
    assert f"running BlockAlarm jid={jid}" in stack
    record = out[out.index(stack):].split("\n20")[0]
    assert re.search(r'File "[^"]*jobs\.py", line \d+, in perform', record)
    # And the slot's end names the master's kill, not an out-of-memory guess
    assert "killed by the master: its job ran past its timeout + grace" in out
    assert "out of memory" not in out
    assert d.stop() == 0


def test_a_worker_killed_at_the_shutdown_deadline_is_said_to_be(daemon, producer, r):
    d = daemon(concurrency=1, timeout=1)
    jid = jobs.Gate.perform_async("deadline")
    wait_for(lambda: jid in jobs_started(r), what="job start")
    d.signal(signal.SIGTERM)
    assert d.wait(15) == 0
    out = d.output()
    assert "worker 0 stopped (killed by the master at the shutdown deadline); 1 job(s) put " \
           "back" in out
    assert "out of memory" not in out
    jobs.open_gate(r, "deadline")


def jobs_started(r) -> dict:
    return {k.decode(): int(v) for k, v in r.hgetall(jobs.RUNS).items()}


def test_the_masters_title_follows_the_workers_at_once(daemon, producer, r):
    # Given a heartbeat far away (the title used to change only with it)
    d = daemon(concurrency=2, heartbeat_interval=30, lease_timeout=60)
    wait_for(lambda: "[0 of 2 busy]" in title(d.pid), 5, what="idle title")
    jid = jobs.Gate.perform_async("title")
    wait_for(lambda: "[1 of 2 busy]" in title(d.pid), 5, what="busy title")
    jobs.open_gate(r, "title")
    wait_for(lambda: "[0 of 2 busy]" in title(d.pid), 5, what="idle title again")
    assert jid in jobs_started(r)
    assert d.stop() == 0


def test_usr2_reopens_the_log_file_in_the_master_and_every_worker(
        daemon, producer, r, tmp_path):
    # Given a daemon logging to a file
    path = tmp_path / "queued.server.log"
    d = daemon(concurrency=2, logfile=str(path))
    wait_for(lambda: path.exists() and "jobs:" in path.read_text(), 10, what="the log file")
    # When logrotate moves it away and sends USR2
    path.rename(tmp_path / "queued.log.1")
    d.signal(signal.SIGUSR2)
    wait_for(lambda: path.exists() and path.read_text().count("log file reopened") == 3, 5,
             what="the master and both workers in the new file")
    # Then the lines of the master and of both workers go to the new file
    for i in range(20):
        jobs.Record.perform_async(i)
    wait_for(lambda: len(jobs_done(r)) == 20, 10, what="the jobs")
    tids = set(re.findall(r" tid=(w\d) .*INFO queued.worker: done", path.read_text()))
    assert tids == {"w0", "w1"}, path.read_text()
    assert " done" not in (tmp_path / "queued.log.1").read_text()
    assert d.stop() == 0


def jobs_done(r) -> dict:
    return {k.decode(): int(v) for k, v in r.hgetall(jobs.DONE).items()}
