"""How many jobs a worker of one job at a time reserves per round trip (worker.Worker._adapt):
a batch doubles up to ``prefetch`` while the next would run within BATCH_SPAN (10 ms), stays
while this one did, and falls back to one job otherwise. Pure arithmetic on the worker's state."""
from types import SimpleNamespace

import pytest

from queued.server.worker import BATCH_SPAN, Worker


def sizes(per_job: float, rounds: int = 8, prefetch: int = 32) -> list[int]:
    """The batch sizes a worker asks for, round after round, when every job takes
    ``per_job`` seconds and the queue always has enough."""
    w = SimpleNamespace(batch=1, config=SimpleNamespace(prefetch=prefetch))
    out = []
    for _ in range(rounds):
        out.append(w.batch)
        Worker._adapt(w, w.batch, w.batch, w.batch * per_job)
    return out


@pytest.mark.parametrize("per_job, expected", [
    (0.0001, [1, 2, 4, 8, 16, 32, 32, 32]),   # no-op jobs: up to prefetch
    (0.001, [1, 2, 4, 8, 8, 8, 8, 8]),         # 1 ms: 8 (8 ms; 16 would take 16 ms)
    (0.005, [1, 2, 2, 2, 2, 2, 2, 2]),         # 5 ms: 2 (10 ms)
    (0.006, [1, 1, 1, 1, 1, 1, 1, 1]),         # 6 ms: one at a time (2 would take 12 ms)
    (0.02, [1, 1, 1, 1, 1, 1, 1, 1]),
])
def test_a_batch_grows_while_the_next_would_run_within_batch_span(per_job, expected):
    assert BATCH_SPAN == 0.01
    assert sizes(per_job) == expected


def test_prefetch_caps_the_batch():
    assert sizes(0.0001, prefetch=8) == [1, 2, 4, 8, 8, 8, 8, 8]
    assert sizes(0.0001, prefetch=1) == [1] * 8


def test_a_short_queue_a_stop_or_a_slow_batch_goes_back_to_one_job():
    def after(batch, got, done, elapsed):
        w = SimpleNamespace(batch=batch, config=SimpleNamespace(prefetch=32))
        Worker._adapt(w, got, done, elapsed)
        return w.batch
    assert after(16, 16, 16, 0.004) == 32      # full, quick: doubles
    assert after(16, 16, 16, 0.008) == 16      # full, within 10 ms, 32 would not be: stays
    assert after(16, 10, 10, 0.001) == 1       # the queue had fewer than asked
    assert after(16, 16, 9, 0.001) == 1        # stopped (TERM, a give-back) before the end
    assert after(16, 16, 16, 0.011) == 1       # past 10 ms
