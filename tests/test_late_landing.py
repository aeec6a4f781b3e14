"""A job that a dead worker's BLMOVE takes after its master put that slot back and left (issue
16.1, suspected): Redis serves a blocked BLMOVE until it notices the client is gone, which it
does when it reads the closed socket (or at the block's timeout). A worker SIGKILLed while
blocked, whose closing Redis has not read yet when its master has already emptied its slot and
unregistered, would take the next job pushed into a landing list nobody will ever look at.

Here the worker's connection is a real one, blocked in BLMOVE, that nobody will read again (the
worker is dead; Redis has not noticed): the master's recovery steps are called as its loop
calls them (Exits.add, then unregister at its exit)."""
from __future__ import annotations

import threading

import redis as redis_lib

from queued import config
from queued.keys import Keys
from queued.server import recovery
from queued.server.children import Exit
from queued.server.master import Master

from conftest import job
from harness import wait_for, worker_connections

K = Keys()


def test_a_job_pushed_after_a_dead_workers_slot_was_put_back_stays_in_its_queue(
        r, redis_url, make_fetcher):
    # Given a master and its worker in slot 0, blocked in BLMOVE (its client id in the watch
    # table, as a blocked worker leaves it)
    m = Master(config.from_dict({"redis_url": redis_url, "concurrency": 1}, environ={}))
    recovery.register(r, K, m.identity, m.slots, ["default"], 30_000)
    f = make_fetcher(identity=m.identity, register=False, block=5)
    m.watch.set_client(0, f.connect())
    m.watch.set(0, 0)
    landed: list = []
    blocked = threading.Thread(target=lambda: landed.append(_block(f)), daemon=True)
    blocked.start()
    wait_for(lambda: worker_connections(r, blocked=True), 10, what="the BLMOVE to block")
    # When the worker dies (Redis has not read its closed socket yet), the master reaps it,
    # puts its slot back, and then stops: its registration gone
    m.exits.add(Exit(slot=0, code=-9, reason="crash", running=(), culprits={}))
    recovery.unregister(r, K, m.identity)
    # And a producer pushes a job
    r.lpush("queue:default", job(1))
    blocked.join(10)
    # Then the job is in its queue, for a live worker to take: the dead worker's BLMOVE was
    # ended with its connection (CLIENT KILL) before the slot was put back. Without that it
    # took the job into a landing list of a master that no longer exists, where no master
    # ever looks (lost until someone reads Redis by hand)
    assert r.lrange("queue:default", 0, -1) == [job(1)]
    assert [k for k in r.keys("queued:landing:*") if r.llen(k)] == []
    assert landed == ["connection closed"]
    m.waker.close()


def _block(f) -> object:
    try:
        return f.block("default")
    except (redis_lib.ConnectionError, OSError):
        return "connection closed"
