"""giveback.py: the jobs a worker reserved behind one that runs long go back to the head of
their queue, the ones before it (finished, acks on the way) and it stay (issue 16)."""
import json
import time
from types import SimpleNamespace

from queued import config
from queued.keys import Keys
from queued.server import giveback
from queued.server import recovery
from queued.server.giveback import HOLD_LIMIT, GiveBack, give_back
from queued.server.running import Running
from queued.server.slots import SlotTable, SlotWriter

from conftest import FETCH_IDENTITY, job

K = Keys()
CFG = config.from_dict({"queues": ["default"]}, environ={})


def test_give_back_keeps_the_running_job_and_those_before_it(r, make_fetcher):
    f = make_fetcher()
    r.lpush("queue:default", *[job(i) for i in range(1, 6)])
    batch = f.reserve(5)
    running = Running(json.loads(batch[1].payload)["jid"], behind=3)
    assert give_back(r, K, FETCH_IDENTITY, CFG, 0, running) == 3
    # the later three are back, in their order, at the head (the right end: next to run)
    assert r.lrange("queue:default", 0, -1) == [job(5), job(4), job(3)]
    assert r.zrange(K.reserved(FETCH_IDENTITY, 0), 0, -1) == [b.member for b in batch[:2]]


def _three_reserved(r, make_fetcher):
    """A slot that reserved three jobs in one batch, its record (SlotWriter, pid 4242) and a
    master's GiveBack over one slot."""
    f = make_fetcher()
    r.lpush("queue:default", *[job(i) for i in range(1, 4)])
    batch = f.reserve(3)
    table = SlotTable(1)
    return batch, table, SlotWriter(table, 0, 4242), GiveBack(1)


def test_the_master_acts_once_the_job_in_front_ran_past_the_limit(r, make_fetcher,
                                                                  monkeypatch):
    batch, table, w, gb = _three_reserved(r, make_fetcher)
    # The master's clock is the test's: the job began between `before` and `after` on the
    # real one, and the master's steps come when the test says, however loaded the machine
    before = time.monotonic()
    w.begin(json.loads(batch[0].payload)["jid"], "default", "X", None, held=2)
    after = time.monotonic()
    now = [before]
    monkeypatch.setattr(giveback, "time", SimpleNamespace(monotonic=lambda: now[0]))
    # A step at once (before HOLD_LIMIT has passed) leaves the batch and says when to look
    gb.step(r, K, FETCH_IDENTITY, CFG, table, {0: 4242})
    assert r.llen("queue:default") == 0 and 0 < gb.due_in(now[0]) <= HOLD_LIMIT + after - before
    assert not gb.revoked(0)
    # and one once HOLD_LIMIT has passed gives back the two behind the running job
    now[0] = after + HOLD_LIMIT
    gb.step(r, K, FETCH_IDENTITY, CFG, table, {0: 4242})
    assert r.lrange("queue:default", 0, -1) == [job(3), job(2)]
    # the worker sees it before its next job of the batch, once
    assert gb.revoked(0) and not gb.revoked(0)


def test_a_worker_looks_only_after_a_job_the_master_could_have_judged_slow(r, make_fetcher):
    """Issue 18: the look costs two lockf calls, so the worker makes it only after a job that
    ran HOLD_LIMIT or more (by the stamp its record had): before that the master cannot have
    acted on it; an act on a slow job is seen after that job."""
    batch, table, w, gb = _three_reserved(r, make_fetcher)
    # Given a job that ran past the limit with two held behind it, given back by the master
    w.begin(json.loads(batch[0].payload)["jid"], "default", "X", None, held=2)
    time.sleep(HOLD_LIMIT)
    gb.step(r, K, FETCH_IDENTITY, CFG, table, {0: 4242})
    w.end(False)
    # When the worker looks after it: it sees the act (the job's stamp is HOLD_LIMIT old)
    assert gb.revoked(0, w.started)
    # And after a job that ran under the limit it does not look (no lock, the flag is left
    # alone: the master acts only on a record still busy HOLD_LIMIT after its stamp)
    w.begin(json.loads(batch[1].payload)["jid"], "default", "X", None, held=1)
    w.end(False)
    gb.flags[0] = 1
    assert not gb.revoked(0, w.started)
    assert gb.flags[0] == 1


def test_a_running_job_sharing_its_jid_with_a_finished_one_is_never_given_back(r, make_fetcher):
    # Given a batch: a finished job (its ack not sent yet), the running one and the next one
    # share a jid, and one more waits behind (rt2 finding 5: the finished one was kept, the
    # running one put back, and it ran twice at once)
    f = make_fetcher()
    same = [json.dumps({"class": "Tagged", "args": [tag], "jid": "x" * 24}).encode()
            for tag in ("finished", "running", "later")]
    r.lpush("queue:default", *same, job(4))
    batch = f.reserve(4)
    table = SlotTable(1)
    w = SlotWriter(table, 0, 4242)
    gb = GiveBack(1)
    w.begin("x" * 24, "default", "Tagged", None, held=2)
    # When the running one has run past the hold limit
    time.sleep(HOLD_LIMIT)
    gb.step(r, K, FETCH_IDENTITY, CFG, table, {0: 4242})
    # Then only the two behind it went back (the later one of its jid too); it and the
    # finished one stay reserved
    assert r.lrange("queue:default", 0, -1) == [job(4), same[2]]
    assert r.zrange(K.reserved(FETCH_IDENTITY, 0), 0, -1) == [b.member for b in batch[:2]]
    # And the master still finds the running one, though its record counts two behind it
    running = Running.of(table.read(0))
    assert running == Running("x" * 24, behind=2)
    assert recovery.current_job(r, K, FETCH_IDENTITY, 0, ["default"], running) == batch[1]
