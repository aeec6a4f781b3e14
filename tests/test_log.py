"""queued.server.log: the line format, the job context, and the per-job line written without logging's
machinery."""
from __future__ import annotations

import json
import logging
import re

import pytest

from queued.server import log as logsetup
from queued.server.reserved import Reservation

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z pid=\d+ tid=w3(.*)$")


@pytest.fixture
def logfile(tmp_path):
    """queued's logging set up as the daemon does (to a file), put back afterwards. The test
    itself calls ``ours()`` first: pytest adds its capture handlers to the root logger when
    the test body starts, which a daemon does not have."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    path = tmp_path / "queued.server.log"
    logsetup.setup("INFO", str(path), tag="w3")
    handler = root.handlers[-1]
    yield path, lambda: root.handlers.__setitem__(slice(None), [handler])
    handler.close()
    root.handlers[:], root.level = saved
    logsetup.set_context("")


def res(queue: str, payload: bytes = b'{"jid":"x"}') -> Reservation:
    """The reservation a job's done line reads its queue and payload from."""
    return Reservation(b"", queue, payload)


def lines(path) -> list[str]:
    return [LINE.match(x).group(1) for x in path.read_text().splitlines()]


def test_a_jobs_lines_carry_its_class_and_jid_and_every_line_its_logger(logfile):
    logfile, ours = logfile
    ours()
    logging.getLogger("queued.worker").info("before")
    logsetup.set_context(logsetup.job_context("Billing::InvoiceJob", "15acda24f01de58f49b27035"))
    logging.getLogger("app.billing").warning("charging %d", 42)
    logsetup.set_context("")
    logging.getLogger("queued.worker").info("after")
    assert lines(logfile) == [
        " INFO queued.worker: before",
        " class=Billing::InvoiceJob jid=15acda24f01de58f49b27035 WARNING app.billing: charging 42",
        " INFO queued.worker: after"]


def test_the_done_line_made_from_the_jobs_figures_is_the_line_logging_writes(logfile):
    # Given the worker's done line bound to queued's own handler, the job's context set as
    # it starts (without elapsed: the worker passes the job's figures to done() instead)
    logfile, ours = logfile
    ours()
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    logsetup.set_context(logsetup.job_context("X", "j" * 24, queue="default"))
    # When it is written from the figures both ways (fast, and through logging)
    joblog.done("X", "j" * 24, 0.0123456, res("default"))
    joblog.flush()
    joblog.use_logging()
    joblog.done("X", "j" * 24, 0.0123456, res("default"))
    # Then both lines are the same, with elapsed
    assert lines(logfile) == [f" class=X jid={'j' * 24} elapsed=0.012 INFO queued.worker: done"] * 2


@pytest.mark.parametrize("cls", [logsetup.JobLog, logsetup.LaneJobLog])
def test_another_logging_setup_gets_the_done_line_through_logging(logfile, cls):
    # Given the application added a handler of its own (a log shipper, say)
    logfile, ours = logfile
    ours()
    seen = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logging.getLogger().addHandler(Collect())
    joblog = cls("queued.worker")
    joblog.bind()
    # Then the line goes through logging, to both handlers
    joblog.done("X", "j" * 24, 1.5, res("q"))
    assert joblog.handler is None
    assert seen == ["done"]
    assert lines(logfile) == [f" class=X jid={'j' * 24} elapsed=1.500 INFO queued.worker: done"]


def test_no_done_line_when_info_is_off(logfile):
    logfile, ours = logfile
    ours()
    logging.getLogger("queued.worker").setLevel(logging.WARNING)
    try:
        joblog = logsetup.JobLog("queued.worker")
        joblog.bind()
        joblog.done("X", "j" * 24, 0.5, res("q"))
        joblog.flush()
        assert logfile.read_text() == ""
    finally:
        logging.getLogger("queued.worker").setLevel(logging.NOTSET)


def test_verbose_shows_queueds_debug_lines_and_keeps_other_libraries_quiet(logfile):
    logfile, ours = logfile
    logsetup.setup("DEBUG", str(logfile), tag="w3")
    ours = logging.getLogger().handlers[-1]
    logging.getLogger().handlers[:] = [ours]
    logging.getLogger("queued.scheduler").debug("moved 3")
    logging.getLogger("redis.connection").debug("handshake noise")
    logging.getLogger("redis.connection").warning("a real problem")
    assert lines(logfile) == [" DEBUG queued.scheduler: moved 3",
                              " WARNING redis.connection: a real problem"]
    logging.getLogger("queued").setLevel(logging.NOTSET)


def test_reopen_writes_to_the_new_file_after_a_rotation(logfile, tmp_path):
    logfile, ours = logfile
    ours()
    logging.getLogger("queued.worker").info("one")
    logfile.rename(tmp_path / "queued.log.1")  # what logrotate does
    logging.getLogger("queued.worker").info("two")  # still into the moved file
    logsetup.reopen()
    logging.getLogger("queued.worker").info("three")
    assert lines(tmp_path / "queued.log.1") == [" INFO queued.worker: one",
                                                 " INFO queued.worker: two"]
    assert lines(logfile) == [" INFO queued.worker: three"]


def test_a_batchs_done_lines_wait_for_its_end_and_never_pass_another_line(logfile):
    logfile, ours = logfile
    ours()
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    for jid in ("a" * 24, "b" * 24):
        joblog.done("X", jid, 0.001, res("q"))
    assert logfile.read_text() == ""  # held until the batch ends...
    logging.getLogger("queued.worker").warning("something else")  # ...or another line comes
    joblog.done("X", "c" * 24, 0.001, res("q"))
    joblog.flush()
    got = lines(logfile)
    assert [x.split(" INFO ")[0].split(" WARNING ")[0] for x in got] == [
        f" class=X jid={'a' * 24} elapsed=0.001", f" class=X jid={'b' * 24} elapsed=0.001",
        "", f" class=X jid={'c' * 24} elapsed=0.001"]
    assert got[2] == " WARNING queued.worker: something else" and got[3].endswith(": done")


def bound_at(monkeypatch, now: float, cls=logsetup.JobLog) -> logsetup.JobLog:
    """A JobLog (or ``cls``) bound to queued's handler, with the clock it reads stopped at
    ``now``."""
    monkeypatch.setattr(logsetup.time, "time", lambda: now)
    joblog = cls("queued.worker")
    joblog.bind()
    return joblog


def test_a_lane_joblogs_held_lines_go_out_at_max_pending(logfile, monkeypatch):
    # (with the clock stopped: the count does not wait for a new millisecond, RT12)
    logfile, ours = logfile
    ours()
    joblog = bound_at(monkeypatch, 1_800_000_000.0, logsetup.LaneJobLog)
    for i in range(logsetup.MAX_PENDING - 1):
        joblog.done("X", f"{i:024d}", 0.001, res("q"))
    assert logfile.read_text() == ""
    joblog.done("X", "z" * 24, 0.001, res("q"))
    assert len(lines(logfile)) == logsetup.MAX_PENDING
    for i in range(logsetup.MAX_PENDING):
        joblog.done("X", f"{i:024d}", 0.001, res("q"))
    assert len(lines(logfile)) == 2 * logsetup.MAX_PENDING


def test_a_joblog_holds_its_batchs_lines_until_the_worker_flushes(logfile, monkeypatch):
    # (a worker of one job at a time writes them as its batch ends and as its acks go out:
    # tests/integration/test_done_lines.py; no count per line)
    logfile, ours = logfile
    ours()
    joblog = bound_at(monkeypatch, 1_800_000_000.0)
    for i in range(3 * logsetup.MAX_PENDING):
        joblog.done("X", f"{i:024d}", 0.001, res("q"))
    assert logfile.read_text() == ""
    joblog.flush()
    assert len(lines(logfile)) == 3 * logsetup.MAX_PENDING


# --- log_format: json -----------------------------------------------------------------------

@pytest.fixture
def jsonlog(tmp_path):
    """queued's logging in json mode, to a file, as tid w3; text mode again afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    path = tmp_path / "queued.json.log"
    logsetup.setup("INFO", str(path), tag="w3", log_format="json")
    handler = root.handlers[-1]
    yield path, lambda: root.handlers.__setitem__(slice(None), [handler])
    handler.close()
    logsetup.setup("INFO", str(tmp_path / "after.log"))  # back to text mode
    root.handlers[-1].close()
    root.handlers[:], root.level = saved
    logsetup.set_context("")


def objects(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_json_lines_carry_the_job_fields_while_it_runs(jsonlog):
    path, ours = jsonlog
    ours()
    logging.getLogger("queued.worker").info("before")
    logsetup.set_context(logsetup.job_context("Billing::InvoiceJob", "15acda24f01de58f49b27035",
                                              queue="critical"))
    logging.getLogger("app.billing").warning("charging %d\n(two lines)", 42)
    logsetup.set_context("")
    got = objects(path)
    assert all(TIME.match(o.pop("time")) for o in got)
    assert got == [
        {"level": "INFO", "logger": "queued.worker", "pid": got[0]["pid"], "tid": "w3", "slot": 3,
         "message": "before"},
        {"level": "WARNING", "logger": "app.billing", "pid": got[0]["pid"], "tid": "w3",
         "slot": 3, "jid": "15acda24f01de58f49b27035", "class": "Billing::InvoiceJob",
         "queue": "critical", "message": "charging 42\n(two lines)"}]


def test_json_fast_done_line_is_the_line_logging_writes(jsonlog):
    path, ours = jsonlog
    ours()
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    assert joblog.handler is not None and joblog.structured
    joblog.done("X", "j" * 24, 0.0123456, res("default"))
    joblog.flush()
    joblog.use_logging()  # the logging module's way
    joblog.done("X", "j" * 24, 0.0123456, res("default"))
    first, second = objects(path)
    assert TIME.match(first.pop("time")) and TIME.match(second.pop("time"))
    assert first == second == {"level": "INFO", "logger": "queued.worker", "pid": first["pid"],
                               "tid": "w3", "slot": 3, "jid": "j" * 24, "class": "X",
                               "queue": "default", "elapsed": 0.012346, "message": "done"}


def test_json_done_lines_of_a_lane_carry_its_tid_and_thread(jsonlog, monkeypatch):
    # (the head kept within a millisecond is made per lane: the lane's line, then the main's)
    path, ours = jsonlog
    ours()
    joblog = bound_at(monkeypatch, 1_800_000_000.5, logsetup.LaneJobLog)
    logsetup.set_lane(2)
    joblog.done("X", "j", 0.5, res("q"))
    logsetup.set_lane(0)
    joblog.done("X", "j", 0.5, res("q"))
    joblog.flush()
    lane, main = objects(path)
    assert (lane["tid"], lane["thread"], lane["slot"]) == ("w3-2", 2, 3)
    assert (main["tid"], "thread" in main) == ("w3", False)


def test_json_done_line_made_from_the_jobs_figures_is_the_line_logging_writes(jsonlog):
    path, ours = jsonlog
    ours()
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    logsetup.set_context(logsetup.job_context("Ünï", "j" * 24, queue="q\"1"))
    for _ in range(2):  # (the second from the class and queue kept)
        joblog.done("Ünï", "j" * 24, 1.5, res("q\"1"))
    joblog.flush()
    joblog.use_logging()
    joblog.done("Ünï", "j" * 24, 1.5, res("q\"1"))
    got = objects(path)
    assert len(got) == 3 and all(o.pop("time") for o in got)
    assert got == [{"level": "INFO", "logger": "queued.worker", "pid": got[0]["pid"],
                    "tid": "w3", "slot": 3, "jid": "j" * 24, "class": "Ünï", "queue": 'q"1',
                    "elapsed": 1.5, "message": "done"}] * 3


def test_json_exception_and_a_signal_handlers_record(jsonlog):
    path, ours = jsonlog
    ours()
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("queued.worker").warning("fail: it broke", exc_info=True)
    logsetup.write_record("INFO", "queued.worker", "TTIN worker 3 idle; stack:\nThread main")
    fail, ttin = objects(path)
    assert (fail["error_class"], fail["error_message"]) == ("ValueError", "boom")
    assert fail["traceback"].startswith("Traceback") and "raise ValueError" in fail["traceback"]
    assert ttin["message"] == "TTIN worker 3 idle; stack:\nThread main"
    assert ttin["slot"] == 3 and "error_class" not in ttin


def test_a_jobs_context_is_its_fields_until_a_line_is_written(logfile):
    # (no text is made per job: most jobs log no line of their own)
    logfile, ours = logfile
    ours()
    context = logsetup.job_context("X", "j", 1.0, "q")
    assert context == ("j", "X", "q", 1.0)
    logsetup.set_context(context)
    logging.getLogger("app").info("inside")
    assert lines(logfile) == [" class=X jid=j elapsed=1.000 INFO app: inside"]


@pytest.mark.parametrize("elapsed", [0.0129, 0.0996, 0.0006, 0.9996, 0.5, 1.0004,
                                     0.0045, 0.0115, 0.0005, 0.9995, 59.9995,
                                     -0.0003, -0.3, -2.0])  # (a clock stepped back: RT11)
def test_the_done_line_rounds_elapsed_as_logging_does(logfile, elapsed):
    # (0.0045 and 0.0115 are ties in decimal, which :.3f settles on the float's exact value:
    # both round down)
    logfile, ours = logfile
    ours()
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    assert joblog.handler is not None
    joblog.done("X", "j" * 24, elapsed, res("q"))
    joblog.flush()
    joblog.use_logging()
    joblog.done("X", "j" * 24, elapsed, res("q"))
    fast, logged = lines(logfile)
    assert fast == logged
    assert fast == f" class=X jid={'j' * 24} elapsed={elapsed:.3f} INFO queued.worker: done"


def fast_and_logged_json(path, shown: str, jid: str, elapsed: float, reservation) -> list[str]:
    """The json done line written fast, then through logging, as text with the time taken
    out (the two may fall in different milliseconds)."""
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    assert joblog.handler is not None and joblog.structured
    joblog.done(shown, jid, elapsed, reservation)
    joblog.flush()
    joblog.use_logging()
    joblog.done(shown, jid, elapsed, reservation)
    # (split at newlines only: splitlines() also splits at U+2028, which JSON leaves as it is)
    return [re.sub(r'^\{"time":"[^"]*",', "{", x) for x in path.read_text().split("\n")[:-1]]


# (0.0078125 and 0.0234375 are exact binary ties at the microsecond, which :.6f settles to the
# even digit; 0.0129996 carries into the millisecond; 0.9999996 rounds to a second)
@pytest.mark.parametrize("elapsed", [0.0129, 0.0123456, 0.0000004, 0.0000005, 0.0078125,
                                     0.0234375, 0.0129996, 0.9999994, 0.9999996, 1.0000004,
                                     59.9999995, 0.0, -0.0000003, -0.3, -2.0])
def test_the_json_done_line_rounds_elapsed_as_logging_does(jsonlog, elapsed):
    path, ours = jsonlog
    ours()
    fast, logged = fast_and_logged_json(path, "X", "j" * 24, elapsed, res("q"))
    assert fast == logged
    assert f',"elapsed":{elapsed:.6f},"message":"done"}}' in fast


@pytest.mark.parametrize("jid", ["15acda24f01de58f49b27035", 'a"b', "a\\b", "tab\there",
                                 "nul\x00", "\x1f\x7f", "Ünï-✓", "\u2028", "a/b"])
@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_the_json_done_lines_jid_is_the_jid_logging_writes(jsonlog, jid, ensure_ascii):
    # (the fast line writes a jid read from a payload without a backslash as it is: such a
    # payload escaped nothing, and its strict parser let no control character through; a
    # payload with one has its jid escaped. Producers escape differently: PHP writes "\/")
    path, ours = jsonlog
    ours()
    from queued import payload as codec
    raw = json.dumps({"class": "X", "jid": jid, "args": ["\u00e9"]},
                     ensure_ascii=ensure_ascii).encode()
    jid_read = codec.loads(raw)["jid"]
    assert jid_read == jid
    fast, logged = fast_and_logged_json(path, "X", jid_read, 0.5, res("q", raw))
    assert fast == logged
    assert json.loads(fast)["jid"] == jid


def test_the_json_done_lines_class_and_queue_are_the_text_logging_writes(jsonlog):
    # (as text, not only as values: non-ASCII written as it is, a quote escaped)
    path, ours = jsonlog
    ours()
    fast, logged = fast_and_logged_json(path, "Ünï::✓", "j", 0.5, res('q"1'))
    assert fast == logged
    assert ',"class":"Ünï::✓","queue":"q\\"1",' in fast


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_jid_utf8_cannot_encode_is_written_as_its_escape(tmp_path, fmt):
    # (a lone surrogate, which a payload can carry as "\\ud800": "?" lost it, RT12)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    path = tmp_path / "q.log"
    logsetup.setup("INFO", str(path), tag="w3", log_format=fmt)
    try:
        joblog = logsetup.JobLog("queued.worker")
        joblog.bind()
        jid = "a\ud800b"
        joblog.done("X", jid, 0.5, res("q", b'{"jid":"a\\ud800b"}'))
        joblog.flush()
        line = path.read_text(encoding="utf-8").rstrip("\n")
    finally:
        root.handlers[-1].close()
        root.handlers[:], root.level = saved
        logsetup.setup("INFO", str(tmp_path / "after.log"))
        root.handlers[-1].close()
        root.handlers[:], root.level = saved
    if fmt == "json":
        assert json.loads(line)["jid"] == jid
    else:
        assert " jid=a\\ud800b elapsed=0.500 " in line


def test_a_payloads_strict_parser_lets_no_raw_control_character_through():
    # (what the fast json line counts on for a payload without a backslash)
    from queued import payload as codec
    for code in range(0x20):
        with pytest.raises(codec.PayloadError):
            codec.loads(b'{"class":"X","jid":"a' + bytes([code]) + b'b","args":[]}')


def test_the_done_lines_stamp_is_the_stamp_logging_writes(logfile, monkeypatch):
    # (the milliseconds of a time in the second the formatter last wrote, and of a new second)
    logfile, ours = logfile
    ours()
    joblog = logsetup.JobLog("queued.worker")
    got = []
    for now in (1_800_000_000.5, 1_800_000_000.75, 1_800_000_002.25):
        monkeypatch.setattr(logsetup.time, "time", lambda now=now: now)
        joblog.bind()
        joblog.done("X", "j" * 24, 0.5, res("q"))
        joblog.flush()
        joblog.use_logging()
        joblog.done("X", "j" * 24, 0.5, res("q"))
        fast, logged = logfile.read_text().splitlines()[-2:]
        assert fast == logged
        got.append(fast[:24])
    assert got == ["2027-01-15T08:00:00.500Z", "2027-01-15T08:00:00.750Z",
                   "2027-01-15T08:00:02.250Z"]


@pytest.mark.parametrize("cls", [logsetup.JobLog, logsetup.LaneJobLog])
def test_a_head_kept_within_its_millisecond_is_the_stamp_of_every_line(logfile, monkeypatch,
                                                                      cls):
    # JobLog keeps a line's head while the clock reads within the millisecond it names: the
    # lines read around millisecond boundaries, a clock stepped back and (in a worker of many
    # jobs) another lane must each carry the stamp a fresh formatter gives that reading, and
    # the head must be reused
    logfile, ours = logfile
    ours()
    joblog = cls("queued.worker")
    joblog.bind()
    made = []
    real_head = joblog._head
    monkeypatch.setattr(joblog, "_head", lambda now: made.append(now) or real_head(now))
    base = 1_800_000_000.0
    times = [base + 0.123, base + 0.1234, base + 0.123999, base + 0.1239999, base + 0.124,
             base + 0.122, base + 0.999999, base + 1.0000001]
    times += [base + 5 + i * 1.3e-6 for i in range(3000)]  # across four boundaries
    for now in times:
        monkeypatch.setattr(logsetup.time, "time", lambda now=now: now)
        joblog.done("X", "j", 0.0, res("q"))
    logsetup.set_lane(2)
    joblog.done("X", "j", 0.0, res("q"))  # (the clock as the last line's: another lane's head)
    logsetup.set_lane(0)
    joblog.done("X", "j", 0.0, res("q"))
    joblog.flush()
    got = logfile.read_text().splitlines()
    want = [logsetup.Formatter("w3").stamp(t) for t in times + [times[-1]] * 2]
    assert [x[:24] for x in got] == want
    # (a worker of one job at a time has no lanes: its JobLog reads none)
    lanes = ["tid=w3-2", "tid=w3"] if cls is logsetup.LaneJobLog else ["tid=w3", "tid=w3"]
    assert [x.split()[2] for x in got[-2:]] == lanes
    assert 8 < len(made) < 40  # (the head made anew per millisecond, not per line)


def test_a_bind_within_the_millisecond_makes_the_head_anew(logfile, monkeypatch):
    # (a worker retagged and bound again, as after a fork, must not write the old tid)
    logfile, ours = logfile
    ours()
    joblog = bound_at(monkeypatch, 1_800_000_000.5)
    joblog.done("X", "j", 0.0, res("q"))
    logsetup.retag("w4")
    joblog.bind()
    joblog.done("X", "j", 0.0, res("q"))
    joblog.flush()
    assert [x.split()[2] for x in logfile.read_text().splitlines()] == ["tid=w3", "tid=w4"]


def test_after_a_failed_write_done_lines_go_through_logging(logfile, monkeypatch):
    # Given done lines held, and a write that fails (a full disk)
    logfile, ours = logfile
    ours()
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    handler = joblog.handler
    joblog.done("X", "a" * 24, 0.5, res("q"))

    def broken():
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(handler, "flush_pending", broken)
    joblog.flush()
    monkeypatch.undo()
    # Then the held line is dropped, and the next ones go through logging
    assert joblog.handler is None and handler.pending == []
    joblog.done("X", "b" * 24, 0.5, res("q"))
    joblog.flush()
    assert lines(logfile) == [f" class=X jid={'b' * 24} elapsed=0.500 INFO queued.worker: done"]


def test_lane_joblog_lines_of_threads_carry_their_own_lane_and_class(logfile):
    # (threads switching every microsecond: without the lock in done() lines took another
    # thread's lane, head or class)
    import sys
    import threading
    logfile, ours = logfile
    ours()
    joblog = logsetup.LaneJobLog("queued.worker")
    joblog.bind()
    n = 20_000

    def write(t):
        logsetup.set_lane(t + 1)
        for i in range(n):
            joblog.done(f"C{t}", f"{t}-{i:020d}", 0.001, res(f"q{t}"))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            joblog.flush()
    finally:
        sys.setswitchinterval(interval)
    joblog.flush()
    written = logfile.read_text().splitlines()
    assert len(written) == len(set(written)) == 4 * n
    pairs = {tuple(x.split()[2:4]) for x in written}
    assert pairs == {(f"tid=w3-{t + 1}", f"class=C{t}") for t in range(4)}


def test_text_done_lines_follow_a_change_of_class(logfile):
    logfile, ours = logfile
    ours()
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    for shown in ("X", "Y", "X"):
        joblog.done(shown, "j", 0.5, res("q"))
    joblog.flush()
    assert [x.split()[0] for x in lines(logfile)] == ["class=X", "class=Y", "class=X"]


def test_json_done_lines_follow_a_change_of_class_or_queue(jsonlog):
    path, ours = jsonlog
    ours()
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    pairs = [("X", "a"), ("X", "b"), ("Y", "b"), ("Y", "b"), ("X", "a")]
    for shown, queue in pairs:
        joblog.done(shown, "j", 0.5, res(queue))
    joblog.flush()
    assert [(o["class"], o["queue"]) for o in objects(path)] == pairs


def test_a_bind_to_another_format_makes_the_class_text_anew(logfile, jsonlog):
    # (json, then text, for the same class and queue: the text line has no json in it)
    path, ours = jsonlog
    ours()
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    joblog.done("X", "j", 0.5, res("q"))
    joblog.flush()
    text_path, text_ours = logfile
    text_ours()
    logsetup.retag("w3")
    joblog.bind()
    assert not joblog.structured
    joblog.done("X", "j", 0.5, res("q"))
    joblog.flush()
    assert lines(text_path) == [" class=X jid=j elapsed=0.500 INFO queued.worker: done"]


def test_a_joblog_of_another_logger_writes_the_line_logging_writes(logfile):
    logfile, ours = logfile
    ours()
    joblog = logsetup.JobLog("queued.other")
    joblog.bind()
    assert joblog.handler is not None
    joblog.done("X", "j", 0.5, res("q"))
    joblog.flush()
    joblog.use_logging()
    joblog.done("X", "j", 0.5, res("q"))
    assert lines(logfile) == [" class=X jid=j elapsed=0.500 INFO queued.other: done"] * 2


def test_a_joblog_of_one_job_at_a_time_writes_no_lane(logfile, monkeypatch):
    # (even where a lane is set and a new millisecond makes the head anew)
    logfile, ours = logfile
    ours()
    joblog = bound_at(monkeypatch, 1_800_000_000.0)
    logsetup.set_lane(2)
    try:
        monkeypatch.setattr(logsetup.time, "time", lambda: 1_800_000_000.0021)
        joblog.done("X", "j", 0.5, res("q"))
    finally:
        logsetup.set_lane(0)
    joblog.flush()
    assert [x.split()[2] for x in logfile.read_text().splitlines()] == ["tid=w3"]


def test_a_joblogs_stamps_hold_while_another_thread_logs_records_of_another_second(
        logfile, monkeypatch):
    # (JobLog makes its heads without the handler's lock: it shared the formatter's second
    # with records other threads format under it, and a line came out a second off, or an
    # IndexError killed the worker: RT13)
    import itertools
    import sys
    import threading
    import time
    import types
    logfile, ours = logfile
    ours()
    start = 1_800_000_000.0
    clock = types.ModuleType("time")  # (log.py's own: other threads read the real clock)
    clock.__dict__.update(vars(time))
    clock.time = itertools.count(start, 0.1307).__next__
    monkeypatch.setattr(logsetup, "time", clock)
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    stop = threading.Event()

    def older():  # (records made earlier, formatted now: a queue of records, say)
        log = logging.getLogger("app.older")
        while not stop.is_set():
            record = log.makeRecord("app.older", logging.INFO, __file__, 1, "old", (), None)
            record.created = start - 3.4
            log.handle(record)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    other = threading.Thread(target=older)
    other.start()
    try:
        for _ in range(1000):
            for _ in range(32):
                joblog.done("X", "j", 0.001, res("q"))
            joblog.flush()
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)
    stamps = [x[:24] for x in logfile.read_text().splitlines() if x.endswith(": done")]
    readings = itertools.islice(itertools.count(start, 0.1307), 1000 * 32)  # (the same sums)
    want = [logsetup.Formatter("w3").stamp(t) for t in readings]
    assert stamps == want


def test_a_line_added_while_the_held_lines_are_taken_stays_held(logfile):
    # (another thread's append between their copy and their removal: RT12)
    path, ours = logfile
    ours()
    handler = logsetup.own_handler()

    class Racing(list):
        raced = False

        def _race(self):
            if not self.raced:
                self.raced = True
                self.append(" late\n")

        def __delitem__(self, i):
            self._race()
            return list.__delitem__(self, i)

        def __setitem__(self, i, v):
            self._race()
            return list.__setitem__(self, i, v)

        def clear(self):
            self._race()
            return list.clear(self)

    handler.pending = Racing([" one\n", " two\n"])
    handler.acquire()
    try:
        handler.flush_pending()
    finally:
        handler.release()
    assert path.read_text() == " one\n two\n"
    assert list(handler.pending) == [" late\n"]


@pytest.mark.parametrize("cls", [logsetup.JobLog, logsetup.LaneJobLog])
def test_the_held_lines_are_written_under_the_handlers_lock(logfile, monkeypatch, cls):
    import threading
    logfile, ours = logfile
    ours()
    joblog = cls("queued.worker")
    joblog.bind()
    handler = joblog.handler
    held = []
    real = handler.flush_pending

    def checked():
        got = []
        probe = threading.Thread(
            target=lambda: got.append(handler.lock.acquire(blocking=False)
                                      and (handler.lock.release() or True)))
        probe.start()
        probe.join()
        held.append(got == [False])  # (another thread could not take it)
        real()

    monkeypatch.setattr(handler, "flush_pending", checked)
    joblog.done("X", "j", 0.5, res("q"))
    joblog.flush()
    for _ in range(logsetup.MAX_PENDING):  # (LaneJobLog: its count's write)
        joblog.done("X", "j", 0.5, res("q"))
    assert held == ([True, True] if cls is logsetup.LaneJobLog else [True])


def test_a_signal_handlers_record_writes_a_lone_surrogate_as_its_escape(logfile):
    path, ours = logfile
    ours()
    logsetup.write_record("WARNING", "queued.worker", "job X (jid a\ud800b) past its limit")
    assert path.read_text(encoding="utf-8").rstrip("\n").endswith(
        "WARNING queued.worker: job X (jid a\\ud800b) past its limit")


def test_a_failed_write_at_max_pending_hands_over_to_logging(logfile, monkeypatch):
    path, ours = logfile
    ours()
    joblog = bound_at(monkeypatch, 1_800_000_000.0, logsetup.LaneJobLog)
    handler = joblog.handler

    def broken():
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(handler, "flush_pending", broken)
    for i in range(logsetup.MAX_PENDING):  # (the last one's write fails: no exception out)
        joblog.done("X", f"{i:024d}", 0.5, res("q"))
    assert joblog.handler is None and handler.pending == []
    joblog.done("X", "b" * 24, 0.5, res("q"))
    assert lines(path) == [f" class=X jid={'b' * 24} elapsed=0.500 INFO queued.worker: done"]


def test_lines_written_while_the_worker_binds_again_are_all_written_once(logfile):
    """A worker of many jobs at once binds its done lines again after a log reopen (USR2)
    while its job threads write them: binding cleared the handler first, and a thread's line
    then raised and was lost (RT10)."""
    import threading
    logfile, ours = logfile
    ours()
    joblog = logsetup.LaneJobLog("queued.worker")
    joblog.bind()
    errors = []

    def write(t):
        for i in range(2000):
            try:
                joblog.done("X", f"{t}-{i:020d}", 0.001, res("q"))
            except Exception as e:  # noqa: BLE001 - what the test counts
                errors.append(e)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        joblog.flush()
        joblog.bind()
    joblog.flush()
    assert errors == []
    written = lines(logfile)
    assert len(written) == len(set(written)) == 8000
