"""queued.server.timeout: the soft time limit, SIGALRM raising JobTimeout inside the job.

Runs in the main thread of the test process (SIGALRM only reaches the main thread). Each test
restores the SIGALRM handler and timer it found.
"""
from __future__ import annotations

import signal
import time

import pytest

from queued.errors import JobTimeout
from queued.server.timeout import job_timeout


@pytest.fixture(autouse=True)
def restore_alarm():
    handler = signal.getsignal(signal.SIGALRM)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, handler)


def test_job_timeout_is_not_an_exception():
    assert issubclass(JobTimeout, BaseException)
    assert not issubclass(JobTimeout, Exception)


def test_a_slow_block_is_interrupted_after_the_limit():
    # Given a job that would sleep for 5 s under a 0.2 s limit
    armed = []
    t0 = time.monotonic()
    # When it runs, then JobTimeout interrupts it: a one-shot timer of 0.2 s was armed
    # for it, and it did not fire before the limit
    with pytest.raises(JobTimeout) as info:
        with job_timeout(0.2, "HardWorker (jid abc)"):
            armed.append(signal.getitimer(signal.ITIMER_REAL))
            time.sleep(5)
    ((left, interval),) = armed
    assert 0 < left <= 0.2 and interval == 0.0
    assert time.monotonic() - t0 >= 0.2
    assert "HardWorker (jid abc)" in str(info.value) and "0.2" in str(info.value)


def test_except_exception_in_job_code_cannot_swallow_it():
    caught = []
    with pytest.raises(JobTimeout):
        with job_timeout(0.1):
            try:
                while True:
                    time.sleep(0.01)
            except Exception as e:  # noqa: BLE001 - what careless job code does
                caught.append(e)
    assert caught == []


def test_a_busy_loop_is_interrupted_too():
    # (the loop ends by itself after 5 s, so a limit that does not interrupt it fails the
    # test instead of hanging it: pytest.raises sees no JobTimeout)
    t0 = time.monotonic()
    with pytest.raises(JobTimeout):
        with job_timeout(0.1):
            while time.monotonic() - t0 < 5:
                sum(range(1000))


def _recording_handler():
    fired = []
    signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    return fired


def test_no_alarm_fires_after_a_fast_block():
    # Given a recording SIGALRM handler (so a stray alarm is seen, not fatal to the run)
    fired = _recording_handler()
    # When a fast job finishes well inside its limit
    with job_timeout(0.1):
        pass
    # Then the timer is cancelled: sleeping past the limit brings no alarm
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    time.sleep(0.25)
    assert fired == []


def test_no_alarm_fires_after_a_block_that_raised():
    fired = _recording_handler()
    with pytest.raises(ValueError):
        with job_timeout(0.1):
            raise ValueError("job failed on its own")
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    time.sleep(0.25)  # past the limit: no alarm may come
    assert fired == []


def test_the_previous_sigalrm_handler_is_restored():
    def mine(signum, frame):
        pass

    signal.signal(signal.SIGALRM, mine)
    with job_timeout(0.5):
        assert signal.getsignal(signal.SIGALRM) is not mine
    assert signal.getsignal(signal.SIGALRM) is mine
    with pytest.raises(JobTimeout):
        with job_timeout(0.05):
            time.sleep(1)
    assert signal.getsignal(signal.SIGALRM) is mine


def test_the_default_handler_is_restored_too():
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    with job_timeout(0.5):
        pass
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    with job_timeout(0.5):
        pass
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_IGN


@pytest.mark.parametrize("limit", [None, 0, 0.0, -1])
def test_none_or_zero_means_no_limit(limit):
    def mine(signum, frame):
        pass

    signal.signal(signal.SIGALRM, mine)
    with job_timeout(limit):
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        assert signal.getsignal(signal.SIGALRM) is mine
        time.sleep(0.05)  # a job running a while: nothing interrupts it
    assert signal.getsignal(signal.SIGALRM) is mine


def test_a_late_alarm_after_exit_does_not_raise():
    # The handler only raises while armed: an alarm delivered in the instant after the job
    # returned must not turn a finished job into a failure.
    t = job_timeout(0.5)
    with t:
        pass
    t._fire(signal.SIGALRM, None)  # what a signal already queued would run


def test_consecutive_limits_each_fire():
    for _ in range(3):
        with pytest.raises(JobTimeout):
            with job_timeout(0.05):
                time.sleep(1)
        with job_timeout(0.05):
            pass


def test_a_lane_timer_raises_jobtimeout_in_its_thread_and_never_after_it_disarmed():
    import threading
    import time as _time

    from queued.server.timeout import LaneTimer
    timer = LaneTimer()
    seen = []

    def spin():
        try:
            with timer(0.2, "Spin (jid x)"):
                while True:
                    pass
        except JobTimeout as e:
            seen.append(str(e))
        # (nothing pending may surface after the with block)
        for _ in range(200000):
            pass
        seen.append("clean")

    t = threading.Thread(target=spin)
    t.start()
    while t.is_alive():
        timer.expire(_time.monotonic())
        _time.sleep(0.02)
    assert seen == ["Spin (jid x) exceeded its 0.2s timeout", "clean"]
    # a job that returned before its deadline is never interrupted later
    with timer(0.05, "quick"):
        pass
    assert timer.expire(_time.monotonic() + 1) is False
