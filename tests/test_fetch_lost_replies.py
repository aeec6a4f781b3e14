"""A job that ran to success while its reservation reply was lost is acked, not run again,
when the next reserve hands it back; and only then (fetch.py's ``_finished``)."""
from __future__ import annotations

import time

from queued.server.scripts import RESERVE
from queued.keys import Keys

from conftest import FETCH_IDENTITY, job

K = Keys()
RESERVED = K.reserved(FETCH_IDENTITY, 0)


def _succeed_with_the_reply_lost(r, fetcher, payload):
    r.script_load(RESERVE.source)  # else the call fails NOSCRIPT and only runs as EVAL later
    r.lpush("queue:default", payload)
    landed = fetcher.block()
    fetcher.reserve_landed()
    time.sleep(0.05)  # let Redis run the call before the connection goes
    fetcher._conn._sock.close()
    assert fetcher.claim(landed, succeeded=True) is None
    assert r.zcard(RESERVED) == 1 and r.llen(K.landing(FETCH_IDENTITY, 0, "default")) == 0


def test_a_byte_identical_later_job_is_run_not_taken_for_the_lost_one(r, make_fetcher):
    # Given a job that succeeded while its reservation reply was lost, whose reservation
    # another master then put back (its lease had expired) and ran elsewhere
    f = make_fetcher()
    _succeed_with_the_reply_lost(r, f, job(1))
    r.delete(RESERVED)
    # When a later job with the very same bytes is pushed (a producer reusing a payload)
    r.lpush("queue:default", job(1))
    # Then the next reserve hands it over to run: the remembered one was not among the jobs
    # the slot held (adopted), so it never comes back; matching any reservation by its bytes
    # acked the new job without running it
    assert [g.payload for g in f.reserve(5)] == [job(1)]


def test_the_remembered_job_is_forgotten_after_the_first_reserve_that_could_return_it(
        r, make_fetcher):
    f = make_fetcher()
    _succeed_with_the_reply_lost(r, f, job(1))
    r.delete(RESERVED)
    assert f.reserve(5) == []
    r.lpush("queue:default", job(1))
    assert [g.payload for g in f.reserve(5)] == [job(1)]


def test_the_lost_one_itself_is_still_acked_when_handed_back(r, make_fetcher):
    f = make_fetcher()
    _succeed_with_the_reply_lost(r, f, job(1))
    r.lpush("queue:default", job(1))  # a byte-identical job waiting behind it
    # The slot still holds the lost reservation: it is adopted and acked, the new one runs
    assert [g.payload for g in f.reserve(5)] == [job(1)]
    f.flush()
    assert r.zcard(RESERVED) == 1


def test_a_lost_call_that_never_ran_leaves_the_job_landed_and_it_is_acked_from_there(
        r, make_fetcher):
    # Given a landed job that succeeded while the reserve call sent for it failed before it
    # ran (here: NOSCRIPT, so it never ran; then the connection broke)
    f = make_fetcher()
    r.script_flush()
    r.lpush("queue:default", job(1))
    landed = f.block()
    f.reserve_landed()
    f._conn._sock.close()
    assert f.claim(landed, succeeded=True) is None
    assert r.llen(K.landing(FETCH_IDENTITY, 0, "default")) == 1 and r.zcard(RESERVED) == 0
    # When the worker reserves again: the job comes out of the landing list and is acked
    assert f.reserve(5) == []
    f.flush()
    assert r.zcard(RESERVED) == 0 and r.llen("queue:default") == 0
