"""log_format: json from a real daemon: every line of the master and its workers parses as one
JSON object; a job's lines carry its jid, class and queue, its end the elapsed time, a failure
its traceback; and USR2 reopens the file in json mode as in text mode."""
from __future__ import annotations

import json
import signal

import jobs
from harness import wait_for


def objects(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line]


def test_every_line_is_a_json_object_with_the_jobs_fields(daemon, producer, r, tmp_path):
    path = tmp_path / "queued.log"
    d = daemon(concurrency=2, log_format="json", logfile=str(path), max_retries=3)
    ok = [jobs.Chatty.perform_async() for _ in range(3)]
    bad = jobs.Chatty.perform_async(True)
    wait_for(lambda: r.zcard("retry") == 1 and r.hlen(jobs.DONE) == 3, 10, what="the jobs")
    assert d.stop() == 0
    # Every line of the file parses (a traceback or a stack stays inside its object)
    got = objects(path.read_text())
    assert got and all({"time", "level", "logger", "pid", "tid", "slot", "message"} <= set(o)
                       for o in got)
    master = [o for o in got if o["tid"] == "master"]
    assert master[0]["slot"] is None and master[0]["pid"] == d.pid
    assert any(o["message"].startswith("queued ") and "starting" in o["message"]
               for o in master)
    # A job's own line carries its jid, class and queue; its end says done, with elapsed
    for jid in ok:
        mine = [o for o in got if o.get("jid") == jid]
        assert [(o["logger"], o["message"]) for o in mine] == [
            ("app.chatty", "working on it"), ("queued.worker", "done")]
        assert all(o["class"] == "Chatty" and o["queue"] == "default" for o in mine)
        assert mine[0]["slot"] in (0, 1) and mine[0]["tid"] == f"w{mine[0]['slot']}"
        assert "elapsed" not in mine[0] and isinstance(mine[1]["elapsed"], float)
    # A failure carries the exception and its traceback from the job's own code
    (fail,) = [o for o in got if o.get("jid") == bad and o["message"].startswith("fail:")]
    assert fail["level"] == "WARNING" and fail["error_class"] == "ValueError"
    assert fail["error_message"] == "chatty failed"
    assert 'in perform' in fail["traceback"] and "jobs.py" in fail["traceback"]


def test_a_threaded_workers_done_lines_carry_each_jobs_lane(daemon, producer, r, tmp_path):
    # Given a worker of 4 jobs at once, 4 jobs each logging a line then waiting at a gate
    path = tmp_path / "queued.log"
    d = daemon(concurrency=1, threads=4, log_format="json", logfile=str(path))
    ids = [jobs.ChattyGate.perform_async("lanes") for _ in range(4)]
    wait_for(lambda: r.hlen(jobs.RUNS) == 4, 10, what="the 4 jobs running at once")
    jobs.open_gate(r, "lanes")
    wait_for(lambda: r.hlen(jobs.DONE) == 4, 10, what="the jobs")
    assert d.stop() == 0
    # Then each job's done line carries the lane its own line did, 4 lanes in all
    got = objects(path.read_text())
    lanes = set()
    for jid in ids:
        own, done = [o for o in got if o.get("jid") == jid]
        assert (own["message"], done["message"]) == ("waiting", "done")
        assert (done["tid"], done["thread"]) == (own["tid"], own["thread"])
        assert done["tid"] == f"w0-{done['thread']}"
        lanes.add(done["thread"])
    assert len(lanes) == 4


def test_a_done_line_names_the_jid_its_job_started_with(daemon, producer, r, tmp_path):
    # (a job that changes its payload's jid as it runs: its line names the job that ran)
    path = tmp_path / "queued.log"
    d = daemon(concurrency=1, log_format="json", logfile=str(path))
    jid = jobs.RenamesItself.perform_async()
    wait_for(lambda: r.hlen(jobs.DONE) == 1, 10, what="the job")
    assert d.stop() == 0
    (done,) = [o for o in objects(path.read_text()) if o["message"] == "done"]
    assert (done["jid"], done["class"]) == (jid, "RenamesItself")


def test_usr2_reopens_the_file_in_json_mode(daemon, producer, r, tmp_path):
    path = tmp_path / "queued.log"
    d = daemon(concurrency=2, log_format="json", logfile=str(path))
    # When logrotate moves the file away and sends USR2
    path.rename(tmp_path / "queued.log.1")
    d.signal(signal.SIGUSR2)
    wait_for(lambda: path.exists() and path.read_text().count("log file reopened") == 3, 5,
             what="the master and both workers in the new file")
    # Then the master and both workers write JSON lines there
    jobs.Record.perform_bulk([[i] for i in range(20)])
    wait_for(lambda: r.hlen(jobs.DONE) == 20, 10, what="the jobs")
    assert d.stop() == 0
    got = objects(path.read_text())
    assert {o["tid"] for o in got if "log file reopened" in o["message"]} == {
        "master", "w0", "w1"}
    assert {o["tid"] for o in got if o["message"] == "done"} == {"w0", "w1"}
    assert not any(o["message"] == "done" for o in objects((tmp_path / "queued.log.1")
                                                          .read_text()))
