"""queued.server.retry against the payloads real Sidekiq 6.4.1 wrote (SIDEKIQ_FORMAT.md section 5).

Pure tests: no Redis. The clock and the jitter are injected, so a rewritten payload can be
compared byte for byte with the captured retry and dead members.
"""
from __future__ import annotations

import json
import logging
import random

import pytest

from queued import payload
from queued.server import retry
from queued.server.retry import (
    DEAD_MAX_JOBS,
    DEAD_TIMEOUT_IN_SECONDS,
    Outcome,
    compress_backtrace,
    dead_trim_bounds,
    decide,
    decompress_backtrace,
    delay_for,
    error_class,
    error_message,
    ruby_backtrace,
)

# Exception classes named like the Ruby ones, so error_class comes out the same.
ArgumentError = type("ArgumentError", (Exception,), {})
IOError_ = type("IOError", (Exception,), {})

# --- captured from real Sidekiq 6.4.1 (SIDEKIQ_FORMAT.md section 5) ---------------------
NB_QUEUED = ('{"retry":true,"queue":"default","args":["nb"],"class":"FailNoBacktraceWorker",'
             '"jid":"3f44cb62031a62e64d5f665f","created_at":1795236014.9418752,'
             '"enqueued_at":1795236014.941892}')
NB_FAILED_AT = 1795236015.7525392
NB_RETRY_SCORE_1 = 1795236037.752563
NB_RETRY_1 = ('{"retry":true,"queue":"default","args":["nb"],"class":"FailNoBacktraceWorker",'
              '"jid":"3f44cb62031a62e64d5f665f","created_at":1795236014.9418752,'
              '"enqueued_at":1795236014.941892,"error_message":"plain runtime error",'
              '"error_class":"RuntimeError","failed_at":1795236015.7525392,"retry_count":0}')
NB_REENQUEUED_AT = 1795236037.7703428
NB_RETRIED_AT = 1795236037.7710667
NB_RETRY_SCORE_2 = 1795236055.771089
NB_RETRY_2 = ('{"retry":true,"queue":"default","args":["nb"],"class":"FailNoBacktraceWorker",'
              '"jid":"3f44cb62031a62e64d5f665f","created_at":1795236014.9418752,'
              '"enqueued_at":1795236037.7703428,"error_message":"plain runtime error",'
              '"error_class":"RuntimeError","failed_at":1795236015.7525392,"retry_count":1,'
              '"retried_at":1795236037.7710667}')

FAIL_BT_BLOB = (
    "eJy1ldtugzAMhl8FcdNNWptxSg+a9hK7nCYWwIWMQJgT2vXtB6ST4GJ3+NZJ\n"
    "/Om3fzvvPrtqrJmxACjbksnWAuqOWa2Vmc4AzQ6zU7g/ydb77ADPGpuN/+Sz\n"
    "3iAzlUBg2Ge3EhqzHZ+XKKzULRNKsTHIjCyglt9bvot3AVMy+4uwDnUOxmgc\n"
    "CcGRTwj4gby3kH7pjATD4wmTKZ3X3kPoKbiAMo/eELxfXAnbyKJQcB1T5JWQ\n"
    "7USPooku24uugUZfNNO3uqglK+LzWvJ5LQtpOmHzaiXu4IYUweJt4gauhwNW\n"
    "KBphyVxYQidspMXPy469NLroFZze3JVXGoXBXGFM2LoFN0zcIjFWWBpPhgtP\n"
    "RsSeVLos4V7RiTs4ksaSYfLv3qKctYPzSal0RjRrYby0P2mXoqP7xxC6ISmN\n"
    "HmcEyikKeHiXQbbb94c5IdUtSbG4o2DfrpS9t1KNiRO3Ba5jBwpdrpydJ0vL\n"
    "GnGG1FYIotj4H7+SKk4Q\n")
FAIL_BT_QUEUED = ('{"retry":true,"queue":"default","backtrace":true,"args":[1,"x"],'
                  '"class":"FailWorker","jid":"667472e19c5346ada4ab0e35",'
                  '"created_at":1795236014.941681,"enqueued_at":1795236014.9417014}')
FAIL_BT_FAILED_AT = 1795236015.7459238
FAIL_BT_RETRY = ('{"retry":true,"queue":"default","backtrace":true,"args":[1,"x"],'
                 '"class":"FailWorker","jid":"667472e19c5346ada4ab0e35",'
                 '"created_at":1795236014.941681,"enqueued_at":1795236014.9417014,'
                 '"error_message":"boom ünïcødé [1, \\"x\\"]","error_class":"ArgumentError",'
                 '"failed_at":1795236015.7459238,"retry_count":0,'
                 '"error_backtrace":' + json.dumps(FAIL_BT_BLOB) + '}')

DEAD_BT_BLOB = (
    "eJy1zV0OgkAMRtGtTOYFTYQGgySyFWOUwYojZYrt4M/uFaJL8PW2X87OwoOl\n"
    "A42I4kMLPkQUHiAyk843FM3EVZu88sEcB5QzS5/YlYVRBfRSC4KM7tVir+k0\n"
    "b6WOngPURDBFUH/Czt/SMiuyHMi7X4FBuEFVlknIt+VM4BObMeLhyu4vTFnM\n"
    "jCNuOrNYG8I7ki7NJ34fE7t/Awa2ZC0=\n")
# The DeadWorker's queue payload was not captured before its first failure; enqueued_at
# here is a stand-in. Everything after the first failure is the captured data.
DEAD_QUEUED = ('{"retry":1,"queue":"default","backtrace":3,"args":["dead-me"],'
               '"class":"DeadWorker","jid":"29c64ba4bd319675e7355cea",'
               '"created_at":1795236014.942195,"enqueued_at":1795236014.9422}')
DEAD_FAILED_AT = 1795236015.7509642
DEAD_REENQUEUED_AT = 1795236024.920168
DEAD_RETRIED_AT = 1795236024.9212244
DEAD_MEMBER = ('{"retry":1,"queue":"default","backtrace":3,"args":["dead-me"],'
               '"class":"DeadWorker","jid":"29c64ba4bd319675e7355cea",'
               '"created_at":1795236014.942195,"enqueued_at":1795236024.920168,'
               '"error_message":"dies every time","error_class":"IOError",'
               '"failed_at":1795236015.7509642,"retry_count":1,'
               '"error_backtrace":' + json.dumps(DEAD_BT_BLOB) + ','
               '"retried_at":1795236024.9212244}')

RZ_QUEUED = ('{"retry":0,"queue":"default","args":["rz"],"class":"RetryZeroWorker",'
             '"jid":"3037d84dc3dccb245153108c","created_at":1795236014.9424493,'
             '"enqueued_at":1795236014.9424648}')
RZ_FAILED_AT = 1795236015.7512164
RZ_DEAD = ('{"retry":0,"queue":"default","args":["rz"],"class":"RetryZeroWorker",'
           '"jid":"3037d84dc3dccb245153108c","created_at":1795236014.9424493,'
           '"enqueued_at":1795236014.9424648,"error_message":"retry zero",'
           '"error_class":"RuntimeError","failed_at":1795236015.7512164,"retry_count":0}')

NOW = 1795236100.5


class FixedRand:
    """A stand-in for random.Random whose rand(10) always gives ``value``."""

    def __init__(self, value: int):
        self.value = value
        self.calls = 0

    def randrange(self, n: int) -> int:
        assert n == 10
        self.calls += 1
        return self.value


class Job:
    """A job class with Sidekiq's default options and no hooks."""
    options: dict = {}

    @classmethod
    def get_options(cls) -> dict:
        return {"retry": True, "queue": "default", **cls.options}


def fail(msg_json: str, exc: BaseException, **kw) -> Outcome:
    kw.setdefault("now", NOW)
    kw.setdefault("rand", FixedRand(0))
    return decide(payload.loads(msg_json), exc, kw.pop("queue", "default"), **kw)


def raised(exc: BaseException) -> BaseException:
    """``exc`` with a real traceback three frames deep (outer -> middle -> inner)."""
    def inner():
        raise exc

    def middle():
        inner()

    try:
        middle()
    except BaseException as e:
        return e
    raise AssertionError("unreachable")


# --- byte-for-byte against Sidekiq ---------------------------------------------------------

def test_first_failure_matches_captured_retry_member():
    # Given the captured queue payload; when it fails at the captured failed_at with jitter 7
    out = fail(NB_QUEUED, RuntimeError("plain runtime error"), now=NB_FAILED_AT, rand=FixedRand(7))
    # Then the member is the one Sidekiq wrote, scheduled 0**4 + 15 + 7 s later
    assert out.kind == "retry"
    assert out.payload == NB_RETRY_1
    assert out.score == NB_FAILED_AT + 15 + 7
    assert out.score == pytest.approx(NB_RETRY_SCORE_1, abs=0.01)  # Ruby read the clock twice


def test_second_failure_appends_retried_at_and_keeps_failed_at():
    # Given the retry member after the poller moved it back (enqueued_at re-set in place)
    msg = payload.loads(NB_RETRY_1)
    msg["enqueued_at"] = NB_REENQUEUED_AT
    # When it fails again, with jitter rand(10)=1 times (count + 1)=2
    out = decide(msg, RuntimeError("plain runtime error"), "default",
                 now=NB_RETRIED_AT, rand=FixedRand(1))
    assert out.kind == "retry"
    assert out.payload == NB_RETRY_2
    assert out.score == NB_RETRIED_AT + 1 + 15 + 2
    assert out.score == pytest.approx(NB_RETRY_SCORE_2, abs=0.01)


def test_backtrace_true_matches_captured_member():
    lines = decompress_backtrace(FAIL_BT_BLOB)
    out = fail(FAIL_BT_QUEUED, ArgumentError('boom ünïcødé [1, "x"]'),
               now=FAIL_BT_FAILED_AT, rand=FixedRand(2), backtrace_lines=lines)
    assert out.payload == FAIL_BT_RETRY
    assert out.score == FAIL_BT_FAILED_AT + 17


def test_retry_one_with_retry_in_goes_retry_then_dead_like_dead_worker():
    class DeadWorker(Job):
        options = {"retry": 1, "backtrace": 3}

        @classmethod
        def retry_in(cls, count, exc):
            return 1

    ruby_lines = decompress_backtrace(DEAD_BT_BLOB)
    lines = ruby_lines + ["/app/deeper.rb:1:in `outer'"] * 20  # backtrace: 3 keeps 3
    exc = IOError_("dies every time")
    # When: first failure -> retry in retry_in 1 + jitter 7
    first = decide(payload.loads(DEAD_QUEUED), exc, "default", job_class=DeadWorker,
                   now=DEAD_FAILED_AT, rand=FixedRand(7), backtrace_lines=lines)
    assert first.kind == "retry"
    assert first.score == DEAD_FAILED_AT + 8
    assert first.msg["retry_count"] == 0
    # When: moved back to the queue and failing again -> retry_count 1 == max -> dead
    msg = payload.loads(first.payload)
    msg["enqueued_at"] = DEAD_REENQUEUED_AT
    second = decide(msg, exc, "default", job_class=DeadWorker,
                    now=DEAD_RETRIED_AT, rand=FixedRand(7), backtrace_lines=lines)
    assert second.kind == "dead"
    assert second.score == DEAD_RETRIED_AT
    assert second.payload == DEAD_MEMBER


def test_retry_zero_is_dead_on_first_failure():
    out = fail(RZ_QUEUED, RuntimeError("retry zero"), now=RZ_FAILED_AT)
    assert out.kind == "dead"
    assert out.score == RZ_FAILED_AT
    assert out.payload == RZ_DEAD


# --- the decision ------------------------------------------------------------------------

def test_caller_dict_is_not_mutated():
    msg = payload.loads(NB_QUEUED)
    before = dict(msg)
    out = decide(msg, RuntimeError("x"), "default", now=NOW, rand=FixedRand(0))
    assert msg == before and list(msg) == list(before)
    assert out.msg is not msg


def test_retry_false_drops_with_the_job_unchanged():
    raw = NB_QUEUED.replace('"retry":true', '"retry":false')
    out = fail(raw, RuntimeError("x"))
    assert out.kind == "drop"
    assert out.payload == raw  # no error fields: death handlers get the job as it was


def test_retry_zero_with_dead_false_drops_after_writing_error_fields():
    raw = RZ_QUEUED.replace('"retry":0', '"retry":0,"dead":false')
    out = fail(raw, RuntimeError("retry zero"))
    assert out.kind == "drop"
    assert out.msg["retry_count"] == 0 and out.msg["error_class"] == "RuntimeError"


def test_retry_absent_takes_the_job_class_option_and_writes_it():
    class ThreeTimes(Job):
        options = {"retry": 3}

    raw = NB_QUEUED.replace('"retry":true,', "")
    out = fail(raw, RuntimeError("x"), job_class=ThreeTimes)
    assert out.kind == "retry"
    # Sidekiq's #local assigns msg["retry"] first, so the new key lands before the error fields
    keys = list(out.msg)
    assert keys.index("retry") == keys.index("error_message") - 1
    assert out.msg["retry"] == 3
    # Given retry_count 2, the next failure (count 3) is the last
    msg = dict(out.msg, retry_count=2)
    assert decide(msg, RuntimeError("x"), "default", job_class=ThreeTimes,
                  now=NOW, rand=FixedRand(0)).kind == "dead"


def test_retry_null_takes_the_class_option_in_place():
    class Never(Job):
        options = {"retry": False}

    raw = NB_QUEUED.replace('"retry":true', '"retry":null')
    assert fail(raw, RuntimeError("x"), job_class=Never).kind == "drop"
    out = fail(raw, RuntimeError("x"), job_class=Job)
    assert list(out.msg)[0] == "retry" and out.msg["retry"] is True


def test_retry_absent_without_job_class_means_true_and_is_not_written():
    raw = NB_QUEUED.replace('"retry":true,', "")
    out = fail(raw, RuntimeError("x"))
    assert out.kind == "retry"
    assert "retry" not in out.msg


@pytest.mark.parametrize("max_retries, previous, kind", [
    (25, 23, "retry"), (25, 24, "dead"), (5, 3, "retry"), (5, 4, "dead"), (0, None, "dead"),
])
def test_retry_true_uses_max_retries(max_retries, previous, kind):
    msg = payload.loads(NB_QUEUED)
    if previous is not None:
        msg["retry_count"] = previous
    out = decide(msg, RuntimeError("x"), "default", max_retries=max_retries,
                 now=NOW, rand=FixedRand(0))
    assert out.kind == kind


def test_retry_count_zero_is_truthy_so_the_second_failure_increments():
    msg = dict(payload.loads(NB_QUEUED), retry_count=0, failed_at=1.5)
    out = decide(msg, RuntimeError("x"), "default", now=NOW, rand=FixedRand(0))
    assert out.msg["retry_count"] == 1
    assert out.msg["failed_at"] == 1.5 and out.msg["retried_at"] == NOW


def test_retry_queue_wins_over_the_fetch_queue():
    raw = NB_QUEUED.replace('"queue":"default"', '"queue":"critical","retry_queue":"low"')
    assert fail(raw, RuntimeError("x"), queue="critical").msg["queue"] == "low"
    # Without retry_queue the queue it was fetched from is written, not the payload's
    assert fail(NB_QUEUED, RuntimeError("x"), queue="other").msg["queue"] == "other"


def test_retries_exhausted_hook_gets_the_final_msg_and_can_keep_it_out_of_dead():
    seen = []

    class Hooked(Job):
        @classmethod
        def retries_exhausted(cls, msg, exc):
            seen.append((dict(msg), exc))
            msg["dead"] = False  # Sidekiq checks "dead" after the hook

    exc = RuntimeError("retry zero")
    out = fail(RZ_QUEUED, exc, job_class=Hooked)
    assert out.kind == "drop"
    assert seen[0][1] is exc and seen[0][0]["error_message"] == "retry zero"


def test_retries_exhausted_exception_is_logged_and_swallowed(caplog):
    class Broken(Job):
        @classmethod
        def retries_exhausted(cls, msg, exc):
            raise ValueError("hook bug")

    with caplog.at_level(logging.ERROR, logger="queued.server.retry"):
        out = fail(RZ_QUEUED, RuntimeError("x"), job_class=Broken)
    assert out.kind == "dead"
    assert "retries_exhausted" in caplog.text and "3037d84dc3dccb245153108c" in caplog.text


def test_retries_exhausted_not_called_while_retrying():
    calls = []

    class Hooked(Job):
        @classmethod
        def retries_exhausted(cls, msg, exc):
            calls.append(msg)

    assert fail(NB_QUEUED, RuntimeError("x"), job_class=Hooked).kind == "retry"
    assert calls == []


# --- fields ------------------------------------------------------------------------------

def test_error_message_is_cut_at_10000_characters():
    out = fail(NB_QUEUED, RuntimeError("é" * 10_001))
    assert out.msg["error_message"] == "é" * 10_000


def test_error_message_of_an_empty_exception_is_its_class_name():
    assert error_message(RuntimeError()) == "RuntimeError"
    assert error_message(ArgumentError("")) == "ArgumentError"


def test_error_message_scrubs_lone_surrogates_so_the_payload_stays_utf8():
    out = fail(NB_QUEUED, RuntimeError("bad \udc80 byte ☃"))
    assert out.msg["error_message"] == "bad \ufffd byte ☃"
    assert "☃" in out.payload  # still raw UTF-8, no fallback to ASCII escapes


def test_error_message_when_str_raises():
    class Nasty(Exception):
        def __str__(self):
            raise TypeError("no")

    assert error_message(Nasty()) == "!!! ERROR MESSAGE THREW AN ERROR !!!"


def test_error_class_attribute_overrides_the_class_name():
    class WorkerDied(Exception):
        error_class = "Queued::WorkerKilled"

    out = fail(NB_QUEUED, WorkerDied("worker 4242 died with SIGKILL"))
    assert out.msg["error_class"] == "Queued::WorkerKilled"
    exc = RuntimeError("x")
    exc.error_class = "Custom"
    assert error_class(exc) == "Custom"
    assert error_class(KeyError("k")) == "KeyError"


def test_backtrace_true_stores_every_line_innermost_first():
    raw = NB_QUEUED.replace('"retry":true', '"retry":true,"backtrace":true')
    out = fail(raw, raised(RuntimeError("x")))
    lines = decompress_backtrace(out.msg["error_backtrace"])
    assert len(lines) == 3
    assert lines[0].endswith(":in `inner'") and lines[-1].endswith(":in `raised'")
    assert lines[0].startswith(__file__ + ":")
    assert all(isinstance(s, str) for s in lines)


def test_backtrace_n_keeps_the_first_n_lines():
    raw = NB_QUEUED.replace('"retry":true', '"retry":true,"backtrace":2')
    out = fail(raw, raised(RuntimeError("x")))
    lines = decompress_backtrace(out.msg["error_backtrace"])
    assert [s.rsplit("`", 1)[1] for s in lines] == ["inner'", "middle'"]


@pytest.mark.parametrize("setting, expected", [(True, 50), (3, 3), (0, 0), (-1, 49), ("7", 7)])
def test_backtrace_line_counts(setting, expected):
    msg = dict(payload.loads(NB_QUEUED), backtrace=setting)
    lines = [f"/app/f{i}.py:{i}:in `fn{i}'" for i in range(50)]
    out = decide(msg, RuntimeError("x"), "default", now=NOW, rand=FixedRand(0),
                 backtrace_lines=lines)
    assert decompress_backtrace(out.msg["error_backtrace"]) == lines[:expected]


def test_without_a_backtrace_key_a_bounded_backtrace_is_kept():
    # Given a job that says nothing about backtraces (Sidekiq keeps none for it) whose error
    # has 50 frames, some of them very long lines
    lines = [f"/app/f{i}.py:{i}:in `fn{i}'" + ("x" * 1000 if i == 1 else "") for i in range(50)]
    msg = payload.loads(NB_QUEUED)
    assert "backtrace" not in msg
    # When it fails
    out = decide(msg, RuntimeError("x"), "default", now=NOW, rand=FixedRand(0),
                 backtrace_lines=lines)
    # Then the first DEFAULT_BACKTRACE_LINES lines are kept, innermost first, each cut
    kept = decompress_backtrace(out.msg["error_backtrace"])
    assert retry.DEFAULT_BACKTRACE_LINES == 20 and retry.DEFAULT_BACKTRACE_CHARS == 300
    assert kept == [line[:300] for line in lines[:20]]
    assert len(out.msg["error_backtrace"]) < 1000  # (compressed: a small part of a payload)
    # And from a real traceback: its frames, innermost first
    out = fail(NB_QUEUED, raised(RuntimeError("x")))
    assert [s.rsplit("`", 1)[1] for s in decompress_backtrace(
        out.msg["error_backtrace"])] == ["inner'", "middle'", "raised'"]
    # And an exception never raised (no traceback) keeps Sidekiq's bytes: no field at all
    assert "error_backtrace" not in fail(NB_QUEUED, RuntimeError("x")).msg


@pytest.mark.parametrize("setting", [False, None])
def test_backtrace_false_or_null_stores_nothing(setting):
    msg = dict(payload.loads(NB_QUEUED), backtrace=setting)
    out = decide(msg, raised(RuntimeError("x")), "default", now=NOW, rand=FixedRand(0))
    assert "error_backtrace" not in out.msg


def test_ints_floats_and_big_ints_survive_the_rewrite():
    raw = NB_QUEUED.replace('["nb"]', '[1,1.0,1180591620717411303424,-0.0,1e-05,"1.0"]')
    out = fail(raw, RuntimeError("x"))
    # 1e-05 comes back as Ruby writes it (JSON.generate: 1.0e-05); see payload.dumps
    assert '"args":[1,1.0,1180591620717411303424,-0.0,1.0e-05,"1.0"]' in out.payload
    assert out.msg["args"][2] == 2**70


def test_unknown_keys_and_their_order_are_kept():
    raw = ('{"retry":2,"queue":"setq","custom":{"tenant":7},"args":[],"x_extra":1,'
           '"class":"PlainWorker","jid":"32811eb8f944aae9178a1760"}')
    out = fail(raw, RuntimeError("x"), queue="setq")
    assert out.payload.startswith(raw[:-1] + ',"error_message":"x"')


# --- delay ---------------------------------------------------------------------------------

@pytest.mark.parametrize("count", [0, 1, 2, 5, 10, 24])
def test_delay_formula(count):
    assert delay_for(count, RuntimeError(), rand=FixedRand(0)) == count**4 + 15
    assert delay_for(count, RuntimeError(), rand=FixedRand(9)) == count**4 + 15 + 9 * (count + 1)


def test_delay_with_a_seeded_generator_uses_rand_10():
    seen = {delay_for(0, RuntimeError(), rand=random.Random(seed)) for seed in range(200)}
    assert seen == set(range(15, 25))
    expected = random.Random(7).randrange(10) * 4
    assert delay_for(3, RuntimeError(), rand=random.Random(7)) == 3**4 + 15 + expected


def test_score_is_now_plus_delay_for_later_counts():
    msg = dict(payload.loads(NB_QUEUED), retry_count=4)  # this failure is count 5
    out = decide(msg, RuntimeError("x"), "default", now=NOW, rand=FixedRand(3))
    assert out.score == NOW + 5**4 + 15 + 3 * 6


class Custom(Job):
    value: object = 1

    @classmethod
    def retry_in(cls, count, exc):
        if isinstance(cls.value, Exception):
            raise cls.value
        return cls.value


@pytest.mark.parametrize("value, base", [
    (1, 1), (3600, 3600), (2.9, 2), (None, 15), (0, 15), (-5, 15), ("30", 30),
])
def test_retry_in_replaces_the_base_but_jitter_is_still_added(value, base):
    job = type("CustomJob", (Custom,), {"value": value})
    assert delay_for(0, RuntimeError(), job, FixedRand(4)) == base + 4


def test_retry_in_exception_falls_back_to_default_and_is_logged(caplog):
    job = type("CustomJob", (Custom,), {"value": ZeroDivisionError("oops")})
    with caplog.at_level(logging.ERROR, logger="queued.server.retry"):
        out = fail(NB_QUEUED, RuntimeError("x"), job_class=job, rand=FixedRand(5))
    assert out.score == NOW + 15 + 5
    assert "retry_in" in caplog.text and "ZeroDivisionError" in caplog.text


def test_retry_in_gets_count_and_exception():
    seen = []

    class Spy(Job):
        @classmethod
        def retry_in(cls, count, exc):
            seen.append((count, exc))
            return 10

    exc = RuntimeError("x")
    msg = dict(payload.loads(NB_QUEUED), retry_count=1)
    out = decide(msg, exc, "default", job_class=Spy, now=NOW, rand=FixedRand(1))
    assert seen == [(2, exc)]
    assert out.score == NOW + 10 + 1 * 3


# --- backtrace blob --------------------------------------------------------------------------

def test_captured_blobs_decode_to_strings_and_recompress_byte_for_byte():
    full = decompress_backtrace(FAIL_BT_BLOB)
    three = decompress_backtrace(DEAD_BT_BLOB)
    assert len(full) == 23 and len(three) == 3
    assert all(isinstance(s, str) for s in full + three)
    assert full[0].endswith(":in `perform'")
    assert compress_backtrace(full) == FAIL_BT_BLOB
    assert compress_backtrace(three) == DEAD_BT_BLOB


def test_compress_matches_ruby_for_non_ascii_and_empty():
    # Reference values printed by Ruby 3.1.2:
    # Base64.encode64(Zlib::Deflate.deflate(JSON.generate(lines)))
    lines = ["/app/jobs/ünïcødé.py:12:in `perform'",
             "/app/queued/worker.py:88:in `run ☃ 日本語 😀'",
             "x/y:1:in `<module>'"]
    assert compress_backtrace(lines) == (
        "eJyLVtJPLCjQz8pPKtY/vCfv8PrkwztSDq/UK6i0MjSyysxTSChILUrLL8pV\n"
        "V9KBKC0sTS1NTdEvzy/KTi0CqbOwAKsrKs1TeDSjWeHZ9KXP5qx5sWqewof5\n"
        "MxpA2ir0gYaB1djk5qeU5qTaqSvFAgCpeTBT\n")
    assert compress_backtrace([]) == "eJyLjgUAARUAuQ==\n"


def test_compress_wraps_at_60_characters_with_a_trailing_newline():
    lines = [f"/app/{random.Random(i).random()}.py:{i}:in `f{i}'" for i in range(40)]
    blob = compress_backtrace(lines)
    assert blob.endswith("\n")
    rows = blob.split("\n")[:-1]
    assert len(rows) > 2
    assert all(len(r) == 60 for r in rows[:-1]) and 0 < len(rows[-1]) <= 60
    assert decompress_backtrace(blob) == lines


def test_decompress_accepts_pre_6_lists_and_null_blobs():
    assert decompress_backtrace(["a:1:in `b'"]) == ["a:1:in `b'"]
    null_blob = "eJzLK83JAQAEXwG8\n"  # Base64.encode64(Zlib::Deflate.deflate("null"))
    assert decompress_backtrace(null_blob) == []


@pytest.mark.parametrize("blob", ["not base64 at all!", "aGVsbG8=\n", "eJzLK83JAQAEXwG9\n"])
def test_decompress_of_a_corrupt_blob_raises_value_error(blob):
    with pytest.raises(ValueError):
        decompress_backtrace(blob)


def test_ruby_backtrace_of_an_exception_never_raised_is_empty():
    assert ruby_backtrace(RuntimeError("x")) == []


# --- dead set trimming -------------------------------------------------------------------------

def test_dead_trim_bounds_are_sidekiqs_numbers():
    assert dead_trim_bounds(NOW) == (NOW - 15_552_000, -10_000)
    assert DEAD_TIMEOUT_IN_SECONDS == 15_552_000 and DEAD_MAX_JOBS == 10_000
    trim = dead_trim_bounds(1000.0, dead_timeout_in_seconds=60, dead_max_jobs=5)
    assert trim.min_score_exclusive == 940.0 and trim.rank_stop == -5


def test_outcome_is_frozen():
    out = fail(NB_QUEUED, RuntimeError("x"))
    with pytest.raises(AttributeError):
        out.kind = "dead"
