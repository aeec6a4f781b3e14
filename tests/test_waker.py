"""queued.server.waker: a job pushed to a queue no idle worker waits on wakes one idle worker.

A real Redis, a real blocked client (BLMOVE in a thread) standing for a worker, and the
waker's step called directly."""
from __future__ import annotations

import os
import threading
import time

import pytest
import redis as redis_lib

from queued.keys import Keys
from queued.server.slots import Watch
from queued.server.waker import Waker

K = Keys()
QUEUES = ["a", "b", "c"]


class Sleeper:
    """A client blocked in BLMOVE on one queue, as an idle worker is."""

    def __init__(self, url, watch, slot, queue):
        self.r = redis_lib.Redis.from_url(url, single_connection_client=True)
        self.client_id = self.r.client_id()
        self.result = "blocking"
        watch.set_client(slot, self.client_id)
        watch.set(slot, QUEUES.index(queue))
        self.thread = threading.Thread(target=self._block, args=(queue,), daemon=True)
        self.thread.start()

    def _block(self, queue):
        try:
            self.result = self.r.blmove(K.queue(queue), f"landing:{queue}", 10, "RIGHT", "LEFT")
        except redis_lib.ConnectionError as e:  # the test's Redis went on to the next test
            self.result = e

    def blocked(self, r) -> bool:
        return any(c["id"] == str(self.client_id) and c["cmd"] == "blmove" and "b" in c["flags"]
                   for c in r.client_list())

    def announce(self, waker) -> None:
        """What a worker does once its BLMOVE is on its way (worker._announce_idle)."""
        os.write(waker.idle_w, b"\0")

    def woken(self, timeout=10.0) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()


@pytest.fixture
def waker(r):
    w = Waker(r, K, QUEUES, Watch(2), horizon=5.0)
    # Which keys' invalidation messages it has read (read_through waits on this), and for each
    # message the queues it made pending and what _message said (news or not)
    w.keys_read = []
    w.marked = []
    real = w._message

    def reading(msg, now):
        before = set(w.pending)
        got = real(msg, now)
        if isinstance(msg, list) and len(msg) == 3 and isinstance(msg[2], list):
            w.keys_read.extend(msg[2])
            w.marked.append((msg[2], set(w.pending) - before, got))
        return got
    w._message = reading
    yield w
    w.close()


def settle(waker, until, timeout=10.0):
    """Step the waker until ``until()`` (at most ``timeout`` seconds: only a failure waits
    that long)."""
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        waker.step()
        time.sleep(0.001)
    return until()


def read_through(waker, r) -> None:
    """Step the waker until it has read every invalidation message Redis sent it before now:
    one more key under the watched prefix changes, and its message comes after theirs on the
    same connection. (Stepping a few times for 40 ms passed whether or not a message had
    arrived: a test that nothing happened could not fail.)"""
    marker = K.queue(f"marker-{time.time_ns()}")
    r.set(marker, 1)
    assert settle(waker, lambda: marker.encode() in waker.keys_read), "the marker's message"
    r.delete(marker)


def test_a_push_to_an_unwatched_queue_wakes_a_blocked_worker(r, redis_url, waker):
    waker.step()  # tracking is set up
    sleeper = Sleeper(redis_url, waker.watch, 0, "a")
    assert settle(waker, lambda: sleeper.blocked(r))
    sleeper.announce(waker)
    # (the wake round the announce starts finds b and c empty: nothing is pending before the
    # push, so the wake below comes from the push's own message)
    assert settle(waker, lambda: waker.pending == {})
    # When a job is pushed to queue b, which nobody waits on
    r.lpush(K.queue("b"), b"job")
    # Then the master's step wakes the worker blocked on a: its BLMOVE returns nil at once
    assert settle(waker, lambda: sleeper.woken(0))
    assert sleeper.result is None
    assert r.lrange(K.queue("b"), 0, -1) == [b"job"]  # (the worker's reserve takes it)
    assert waker.pending == {}


def test_a_push_to_a_watched_queue_is_left_to_its_worker(r, redis_url, waker):
    waker.step()
    sleeper = Sleeper(redis_url, waker.watch, 0, "a")
    assert settle(waker, lambda: sleeper.blocked(r))
    sleeper.announce(waker)
    r.lpush(K.queue("a"), b"job")
    assert sleeper.woken()
    assert sleeper.result == b"job"  # its own BLMOVE took it; nobody was unblocked
    read_through(waker, r)
    assert waker.pending == {}


def test_a_pop_that_emptied_the_queue_wakes_nobody(r, redis_url, waker):
    waker.step()
    sleeper = Sleeper(redis_url, waker.watch, 0, "a")
    assert settle(waker, lambda: sleeper.blocked(r))
    sleeper.announce(waker)
    r.lpush(K.queue("b"), b"job")
    r.rpop(K.queue("b"))  # taken by someone before the master looked
    read_through(waker, r)
    assert sleeper.blocked(r) and waker.pending == {}
    r.lpush(K.queue("a"), b"end")
    assert sleeper.woken()


def test_keys_of_other_queues_and_other_prefixes_are_ignored(r, redis_url, waker):
    waker.step()
    sleeper = Sleeper(redis_url, waker.watch, 0, "a")
    assert settle(waker, lambda: sleeper.blocked(r))
    sleeper.announce(waker)
    assert settle(waker, lambda: waker.pending == {})  # (the announce's wake round)
    waker.marked.clear()
    r.lpush(K.queue("not-served"), b"job")
    r.lpush("queues-like-key", b"x")
    read_through(waker, r)
    # Then no message made a queue pending or counted as news (a key looked at and found
    # empty would leave pending empty too, after a wake round)
    assert K.queue("not-served").encode() in [k for keys, _, _ in waker.marked for k in keys]
    assert [(added, got) for _, added, got in waker.marked] == [(set(), False)] * len(
        waker.marked)
    assert sleeper.blocked(r) and waker.pending == {}
    r.lpush(K.queue("a"), b"end")
    assert sleeper.woken()


def test_a_worker_that_blocks_after_the_push_is_woken_when_it_says_so(r, redis_url, waker):
    # Given a push to b, read by the waker while no worker is blocked (both busy)
    waker.step()
    read_through(waker, r)
    waker.pending.clear()  # (set up, it looks at every queue: forget that, so b is pending
    r.lpush(K.queue("b"), b"job")  # only if the push's message made it so)
    read_through(waker, r)
    assert set(waker.pending) == {QUEUES.index("b")}
    # When a worker blocks on a afterwards and says so through the idle pipe
    sleeper = Sleeper(redis_url, waker.watch, 1, "a")
    assert settle(waker, lambda: sleeper.blocked(r))
    sleeper.announce(waker)
    # Then it is woken for the job on b
    assert settle(waker, lambda: sleeper.woken(0))


def test_without_client_tracking_it_says_so_once_and_stays_off(r, waker, caplog, monkeypatch):
    real = waker._connection

    def refusing():
        conn = real()
        original = conn.send_command

        def send(*args, **kwargs):
            if args[:2] == ("CLIENT", "TRACKING"):
                args = ("CLIENT", "NO-SUCH-SUBCOMMAND")
            return original(*args, **kwargs)
        conn.send_command = send
        return conn

    monkeypatch.setattr(waker, "_connection", refusing)
    import logging
    with caplog.at_level(logging.WARNING, logger="queued.waker"):
        waker.step()
        waker.step()
    assert waker.unsupported and waker.sub is None and waker.fds() == [waker.idle_r]
    assert [rec.getMessage().split(" (")[0] for rec in caplog.records] == [
        "Redis refused CLIENT TRACKING"]


def _tracking_clients(r) -> list[str]:
    """The clients with keys tracking on (CLIENT LIST's ``t`` flag)."""
    return [c["id"] for c in r.client_list() if "t" in c["flags"]]


def test_tracking_is_off_while_every_worker_is_busy_and_a_push_meanwhile_still_wakes_one(
        r, redis_url, waker):
    # Given a waker set up (tracking on) more than TRACK_IDLE_OFF ago, no worker waiting since
    # (every one busy). (Set up in the past, so the clock's own later steps keep it off: set
    # up now and stepped at now + TRACK_IDLE_OFF, the next steps at the clock's time went back
    # before it and turned tracking on again with no worker waiting.)
    from queued.server.waker import TRACK_IDLE_OFF
    waker.step(now=time.monotonic() - TRACK_IDLE_OFF - 0.1)
    assert len(_tracking_clients(r)) == 1
    # (set up, it looks at every queue: forget that, so b is pending only if the turn back
    # on looks at every queue again)
    waker.pending.clear()
    waker.step()
    # Then tracking is off: Redis matches no key against the prefixes, sends no message;
    # and it stays off while no worker waits
    assert _tracking_clients(r) == [] and not waker.tracking
    waker.step()
    assert _tracking_clients(r) == [] and not waker.tracking
    waker.keys_read.clear()
    r.lpush(K.queue("b"), b"job")  # (a push while it is off: no message tells of it)
    # When a worker blocks on a and says so
    sleeper = Sleeper(redis_url, waker.watch, 0, "a")
    sleeper.announce(waker)
    # Then tracking is on again and the job on b, found by looking at every queue once,
    # wakes it (its 10 s BLMOVE returns nil well before its timeout; the waker may well
    # unblock it before this test could see it blocked)
    assert settle(waker, lambda: sleeper.woken(0), timeout=5)
    assert sleeper.result is None and waker.tracking and len(_tracking_clients(r)) == 1
    assert r.lrange(K.queue("b"), 0, -1) == [b"job"]
    assert K.queue("b").encode() not in waker.keys_read
