"""queued.middleware: the chain's order, a fresh instance per job, stopping the chain."""
from __future__ import annotations

import pytest

from queued.middleware import Chain


def make(name, log):
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        log.append(("init", name, id(self)))

    def __call__(self, job, msg, queue, call_next):
        log.append(("before", name))
        result = call_next()
        log.append(("after", name))
        return result

    return type(name, (), {"__init__": __init__, "__call__": __call__})


@pytest.fixture
def log():
    return []


@pytest.fixture
def mws(log):
    return {n: make(n, log) for n in "ABCDE"}


def order(chain):
    return [cls.__name__ for cls in chain]


def test_add_appends_and_moves(mws):
    c = Chain()
    c.add(mws["A"])
    c.add(mws["B"])
    c.add(mws["C"])
    assert order(c) == ["A", "B", "C"]
    c.add(mws["A"])  # again: moved to the end, not duplicated
    assert order(c) == ["B", "C", "A"]
    assert len(c) == 3


def test_prepend(mws):
    c = Chain()
    c.add(mws["A"])
    c.prepend(mws["B"])
    c.prepend(mws["A"])
    assert order(c) == ["A", "B"]


def test_insert_before_and_after(mws):
    c = Chain()
    c.add(mws["A"])
    c.add(mws["B"])
    c.insert_before(mws["B"], mws["C"])
    assert order(c) == ["A", "C", "B"]
    c.insert_after(mws["A"], mws["D"])
    assert order(c) == ["A", "D", "C", "B"]
    c.insert_after(mws["B"], mws["E"])
    assert order(c) == ["A", "D", "C", "B", "E"]
    c.insert_before(mws["A"], mws["E"])  # already present: moved
    assert order(c) == ["E", "A", "D", "C", "B"]
    c.insert_after(mws["B"], mws["A"])
    assert order(c) == ["E", "D", "C", "B", "A"]


def test_insert_next_to_a_missing_entry_raises_and_changes_nothing(mws):
    c = Chain()
    c.add(mws["A"])
    c.add(mws["B"])
    with pytest.raises(ValueError, match="C"):
        c.insert_before(mws["C"], mws["D"])
    with pytest.raises(ValueError, match="C"):
        c.insert_after(mws["C"], mws["A"])
    assert order(c) == ["A", "B"]


def test_remove_and_clear(mws):
    c = Chain()
    for n in "ABC":
        c.add(mws[n])
    c.remove(mws["B"])
    assert order(c) == ["A", "C"]
    c.remove(mws["D"])  # absent: nothing happens
    assert order(c) == ["A", "C"]
    c.clear()
    assert order(c) == [] and len(c) == 0


def test_invoke_runs_first_added_outermost(mws, log):
    c = Chain()
    for n in "ABC":
        c.add(mws[n])
    result = c.invoke("job", {"jid": "x"}, "default", lambda: log.append(("final",)) or 42)
    assert result == 42
    assert [e for e in log if e[0] != "init"] == [
        ("before", "A"), ("before", "B"), ("before", "C"), ("final",),
        ("after", "C"), ("after", "B"), ("after", "A")]


def test_invoke_passes_job_msg_queue_and_constructor_arguments():
    seen = []

    class Spy:
        def __init__(self, *args, **kwargs):
            self.config = (args, kwargs)

        def __call__(self, job, msg, queue, call_next):
            seen.append((self.config, job, msg, queue))
            return call_next()

    c = Chain()
    c.add(Spy, 1, 2, level="x")
    msg = {"jid": "j"}
    c.invoke("the job", msg, "low", lambda: None)
    assert seen == [(((1, 2), {"level": "x"}), "the job", msg, "low")]
    c.add(Spy, 3)  # re-adding replaces the arguments
    c.invoke("the job", msg, "low", lambda: None)
    assert seen[-1][0] == ((3,), {})


def test_a_fresh_instance_for_every_invoke(mws, log):
    c = Chain()
    c.add(mws["A"])
    c.add(mws["B"])
    kept = []

    def final():
        kept.append(1)

    c.invoke("j", {}, "q", final)
    c.invoke("j", {}, "q", final)
    inits = [e for e in log if e[0] == "init"]
    assert [name for _, name, _ in inits] == ["A", "B", "A", "B"]
    assert kept == [1, 1]


def test_instance_state_does_not_leak_between_jobs():
    class Counter:
        def __init__(self):
            self.calls = 0

        def __call__(self, job, msg, queue, call_next):
            self.calls += 1
            msg["calls"] = self.calls
            return call_next()

    c = Chain()
    c.add(Counter)
    for _ in range(3):
        msg = {}
        c.invoke("j", msg, "q", lambda: None)
        assert msg["calls"] == 1


def test_a_middleware_that_does_not_call_next_stops_the_chain(mws, log):
    class Stop:
        def __call__(self, job, msg, queue, call_next):
            log.append(("stop",))
            return "stopped"

    c = Chain()
    c.add(mws["A"])
    c.add(Stop)
    c.add(mws["B"])
    ran = []
    result = c.invoke("j", {}, "q", lambda: ran.append(1))
    assert result == "stopped"
    assert ran == []
    assert [e for e in log if e[0] != "init"] == [("before", "A"), ("stop",), ("after", "A")]


def test_an_empty_chain_calls_final():
    assert Chain().invoke("j", {}, "q", lambda: "done") == "done"


def test_an_exception_goes_out_through_every_middleware(mws, log):
    c = Chain()
    c.add(mws["A"])

    def boom():
        raise RuntimeError("job failed")

    with pytest.raises(RuntimeError, match="job failed"):
        c.invoke("j", {}, "q", boom)
    assert ("after", "A") not in log and ("before", "A") in log


def test_an_async_job_runs_inside_async_and_plain_middleware():
    import asyncio

    seen = []

    class Around:  # async: wraps the job's whole run, sees its exception
        async def __call__(self, job, msg, queue, call_next):
            seen.append("around in")
            try:
                return await call_next()
            except ValueError as e:
                seen.append(f"around saw {e}")
                raise
            finally:
                seen.append("around out")

    class Plain:  # sync: returns call_next()'s awaitable, as it does for any job
        def __call__(self, job, msg, queue, call_next):
            seen.append("plain")
            return call_next()

    async def perform():
        await asyncio.sleep(0)
        seen.append("job")
        raise ValueError("boom")

    chain = Chain()
    chain.add(Around)
    chain.add(Plain)
    with pytest.raises(ValueError, match="boom"):  # (the job's error reaches the caller)
        asyncio.run(chain.invoke_async(None, {}, "q", perform))
    assert seen == ["around in", "plain", "job", "around saw boom", "around out"]


def test_a_middleware_that_stops_the_chain_stops_an_async_job():
    import asyncio

    ran = []

    class Gate:
        def __call__(self, job, msg, queue, call_next):
            return None

    async def perform():
        ran.append(1)

    chain = Chain()
    chain.add(Gate)
    assert asyncio.run(chain.invoke_async(None, {}, "q", perform)) is None
    assert ran == []
