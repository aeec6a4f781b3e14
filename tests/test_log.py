"""queued.log: the line format, and the per-job line written without logging's machinery."""
from __future__ import annotations

import logging
import re

import pytest

from queued import log as logsetup

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z pid=\d+ tid=w3 INFO: (.*)$")


@pytest.fixture
def logfile(tmp_path):
    """queued's logging set up as the daemon does (to a file), put back afterwards. The test
    itself calls ``ours()`` first: pytest adds its capture handlers to the root logger when
    the test body starts, which a daemon does not have."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    path = tmp_path / "queued.log"
    logsetup.setup("INFO", str(path), tag="w3")
    handler = root.handlers[-1]
    yield path, lambda: root.handlers.__setitem__(slice(None), [handler])
    handler.close()
    root.handlers[:], root.level = saved


def lines(path) -> list[str]:
    return path.read_text().splitlines()


def test_the_fast_job_line_is_the_line_logging_writes(logfile):
    logfile, ours = logfile
    ours()
    # Given the worker's job line bound to queued's own handler
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    assert joblog.fd is not None
    # When a job line is written both ways, with ordinary lines around them
    logging.getLogger("queued.worker").info("before")
    joblog.done("Billing::InvoiceJob", "15acda24f01de58f49b27035", 0.0123456)
    joblog.fd = None  # the logging module's way
    joblog.done("Billing::InvoiceJob", "15acda24f01de58f49b27035", 0.0123456)
    logging.getLogger("queued.worker").info("after")
    # Then both lines say the same, in the same shape, in order
    got = [LINE.match(x) for x in lines(logfile)]
    assert all(got), lines(logfile)
    assert [m.group(1) for m in got] == [
        "before",
        "class=Billing::InvoiceJob jid=15acda24f01de58f49b27035 elapsed=0.012 done",
        "class=Billing::InvoiceJob jid=15acda24f01de58f49b27035 elapsed=0.012 done",
        "after"]


def test_another_logging_setup_gets_the_line_through_logging(logfile):
    logfile, ours = logfile
    ours()
    # Given the application added a handler of its own (a log shipper, say)
    seen = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    extra = Collect()
    logging.getLogger().addHandler(extra)
    joblog = logsetup.JobLog("queued.worker")
    joblog.bind()
    # Then the line goes through logging, to both handlers
    joblog.done("X", "j" * 24, 1.5)
    assert joblog.fd is None
    assert seen == [f"class=X jid={'j' * 24} elapsed=1.500 done"]
    assert LINE.match(lines(logfile)[0]).group(1) == seen[0]


def test_no_line_when_info_is_off(logfile):
    logfile, ours = logfile
    ours()
    logging.getLogger("queued.worker").setLevel(logging.WARNING)
    try:
        joblog = logsetup.JobLog("queued.worker")
        joblog.bind()
        joblog.done("X", "j" * 24, 1.5)
        assert lines(logfile) == []
    finally:
        logging.getLogger("queued.worker").setLevel(logging.NOTSET)
