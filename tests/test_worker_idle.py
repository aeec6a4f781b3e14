"""Which queue an idle worker waits on (Worker._idle_queue): BLMOVE waits on one list, so idle
workers share the queues out through the master's shared Watch. Pure logic, no Redis."""
from __future__ import annotations

import os
from types import SimpleNamespace

from queued import config as cfgmod
from queued.keys import Keys
from queued.server.slots import SlotTable, Watch
from queued.server.worker import Worker


def make_worker(slot, watch, queues, concurrency=3):
    cfg = cfgmod.from_dict({"concurrency": concurrency, "queues": queues})
    w = Worker(cfg, Keys(), "host:1:abc", slot, SlotTable(concurrency), os.getpid(), watch=watch)
    names = cfg.queue_names
    w.fetcher = SimpleNamespace(queues=names, block_queue=names[slot % len(names)], paused=[])
    return w


def test_idle_workers_share_strict_queues_out_in_priority_order():
    watch = Watch(3)
    queues = ["critical", "default", "low"]
    a, b, c = (make_worker(s, watch, queues) for s in (2, 0, 1))
    # The first to go idle takes the first queue, whatever its slot
    assert a._idle_queue() == "critical"
    watch.set(2, 0)
    # The next ones take the first queues nobody waits on
    assert b._idle_queue() == "default"
    watch.set(0, 1)
    assert c._idle_queue() == "low"
    watch.set(1, 2)
    # When the worker on "critical" gets busy, the next one going idle covers "critical"
    watch.set(2, None)
    watch.set(0, None)
    assert b._idle_queue() == "critical"


def test_weighted_queues_are_covered_heaviest_first():
    watch = Watch(2)
    queues = [["low", 1], ["critical", 6], ["default", 3]]
    w = make_worker(0, watch, queues, concurrency=2)
    assert w._idle_queue() == "critical"
    watch.set(1, 1)  # "critical" taken
    assert w._idle_queue() == "default"


def test_with_every_queue_covered_a_worker_waits_on_its_own_slots_queue():
    watch = Watch(4)
    w = make_worker(3, watch, ["a", "b"], concurrency=4)
    watch.set(0, 0)
    watch.set(1, 1)
    assert w._idle_queue() == "b"  # slot 3 % 2 queues


def test_an_idle_worker_waits_on_no_paused_queue_and_on_none_when_all_are():
    watch = Watch(2)
    w = make_worker(0, watch, ["critical", "default", "low"], concurrency=2)
    w.fetcher.paused = ["critical"]
    assert w._idle_queue() == "default"
    watch.set(1, 1)  # the other idle worker waits on default
    assert w._idle_queue() == "low"
    w.fetcher.paused = ["critical", "low"]
    assert w._idle_queue() == "default"  # (shared with the other one rather than a paused one)
    w.fetcher.paused = ["critical", "default", "low"]
    assert w._idle_queue() is None
