"""Job code whose ``worker_start`` hook adds a logging handler of the application's own (a log
shipper, say): every record, done lines included, is then also written to QUEUED_TEST_RECORDS."""
import logging
import os

import queued
from jobs import Record  # noqa: F401 - the job the test runs


class _ToFile(logging.Handler):
    def emit(self, record):
        with open(os.environ["QUEUED_TEST_RECORDS"], "a") as f:
            f.write(f"{record.name} {record.getMessage()}\n")


@queued.on("worker_start")
def _add_handler():
    logging.getLogger().addHandler(_ToFile())
