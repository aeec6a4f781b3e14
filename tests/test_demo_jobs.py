"""The demo's jobs (etc/demo_jobs.py, what scripts/demo runs) tested as an application tests its
own job code: with queued.testing's fake mode, no Redis and no daemon (docs/testing.md).

``queued_fake`` is queued.testing's pytest fixture (tests/conftest.py turns the plugin on with
``pytest_plugins = ["queued.testing.pytest_plugin"]``, as an application's conftest.py does).

(The ``demo`` fixture loads the file and, afterwards, takes its job classes and its startup
handler out of this process's registries again: other tests here define jobs of the same
names. An application's own test suite simply imports its jobs module.)
"""
import importlib.util
import logging
import os
import time
import warnings

import pytest

import queued
import queued.testing
from queued.jobregistry import JobNameClash
from queued.server.appcode import _Registries
from conftest import ROOT


@pytest.fixture(scope="module")
def demo():
    saved = _Registries.capture()
    spec = importlib.util.spec_from_file_location(
        "demo_jobs", os.path.join(ROOT, "etc", "demo_jobs.py"))
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():  # (tests/faults/faultjobs.py's Tick, for this module only)
        warnings.simplefilter("ignore", JobNameClash)
        spec.loader.exec_module(module)
    yield module
    saved.restore()


def test_tick_pushes_greetings_and_schedules_the_next_tick(demo, queued_fake):
    before = time.time()
    demo.Tick.perform_async(1)
    assert demo.Tick.drain(until=time.time()) == 1  # the due one; the next is 3 s out
    greetings = [job["args"] for job in demo.Greet.jobs]
    assert 1 <= len(greetings) <= 4
    assert greetings == [[f"tick 1.{i}"] for i in range(len(greetings))]
    (again,) = demo.Tick.jobs
    assert again["args"] == [2] and before + 3 <= again["at"] <= time.time() + 3
    # drain() without until runs the scheduled ones too: the 19 ticks left, and their jobs
    assert demo.Tick.drain() == 19 and demo.Tick.jobs == []
    pushed = [job["args"][0] for job in demo.Greet.jobs]
    assert {text.split(".")[0] for text in pushed} == {f"tick {n}" for n in range(1, 21)}
    assert demo.Greet.drain() == len(pushed) and demo.Greet.jobs == []


def test_flaky_fails_on_its_first_run_and_succeeds_on_a_retry(demo, queued_fake, caplog):
    demo.Flaky.perform_async()
    with pytest.raises(RuntimeError, match="first try fails on purpose"):
        demo.Flaky.drain()
    demo.Flaky.set(extra={"retry_count": 0}).perform_async()  # as its first retry carries
    with caplog.at_level(logging.INFO, logger="demo"):
        assert demo.Flaky.drain() == 1
    assert "flaky job succeeded on retry 1" in caplog.text


def test_the_promotion_task_refuses_the_cheap_products_and_reports_once(demo, queued_fake,
                                                                         caplog, monkeypatch):
    monkeypatch.setattr(demo.time, "sleep", lambda seconds: None)  # (the demo is slow to watch)
    with caplog.at_level(logging.INFO, logger="demo"):
        demo.enqueue_examples()  # the startup handler, called as a function
        assert len(demo.RegisterProduct.jobs) == 30
        refused = []
        while demo.RegisterProduct.jobs or demo.PromotionDone.jobs:
            try:
                queued.testing.drain_all()
            except queued.JobFailed as e:
                refused.append(e.reason)
            for other in (demo.Flaky, demo.FetchQuote, demo.SlowQuote):
                other.clear()  # (the other demo jobs are tested on their own)
    assert refused == ["SKU-000: price 2.00 is below cost", "SKU-001: price 3.70 is below cost"]
    (report,) = [r for r in caplog.records if "complete:" in r.getMessage()]  # once
    assert report.getMessage().endswith("complete: 28 registered, 2 refused, 0 errors")
    task_id = report.args[0]
    task = queued.Task.find(task_id)
    assert task.progress()["complete"] and not task.progress()["success"]
    (cheapest,) = [j for j in task.jobs("failed") if j["args"][0] == "SKU-000"]
    assert [m["text"] for m in cheapest["messages"]] == ["checking SKU-000 at 2.00"]


def test_the_async_quotes_run_on_an_event_loop(demo, queued_fake, caplog, monkeypatch):
    async def instant(seconds):
        return None

    monkeypatch.setattr(demo.asyncio, "sleep", instant)  # (the "requests" take no time here)
    demo.FetchQuote.perform_bulk([["ACME"], ["HOOLI"]])
    with caplog.at_level(logging.INFO, logger="demo"):
        assert demo.FetchQuote.drain() == 2
    assert [r.getMessage().split(" is at")[0] for r in caplog.records] == [
        "async: ACME", "async: HOOLI"]
