"""The pure parts of ``scripts/bench --quick`` (scripts/bench_quick.py): how a round's figures
become the guard's ratios and verdicts, and benchlib.CatSink's line count through a real
``cat``. The timed run itself is a benchmark, run by hand (docs/benchmarks.md)."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_quick  # noqa: E402
from benchlib import CatSink  # noqa: E402


def test_ratio_row_at_least_target_passes_on_the_median_of_rounds():
    row = bench_quick.ratio_row("vs-bare", [1.2, 1.4, 1.35], 1.3, "min")
    assert row == {"key": "vs-bare", "median": 1.35, "runs": [1.2, 1.4, 1.35], "target": 1.3,
                   "bound": "min", "verdict": "PASS"}
    assert bench_quick.ratio_row("vs-bare", [1.2, 1.25, 1.4], 1.3, "min")["verdict"] == "MISS"


def test_ratio_row_at_most_target():
    assert bench_quick.ratio_row("redis-cpu", [1.28], 1.0, "max")["verdict"] == "MISS"
    assert bench_quick.ratio_row("redis-cpu", [0.9, 1.0, 1.1], 1.0, "max")["verdict"] == "PASS"


def test_ratio_row_is_judged_as_shown_to_three_places():
    row = bench_quick.ratio_row("log-text", [0.9496], 0.95, "min")
    assert (row["median"], row["verdict"]) == (0.95, "PASS")
    row = bench_quick.ratio_row("log-text", [0.9494], 0.95, "min")
    assert (row["median"], row["verdict"]) == (0.949, "MISS")


def test_ratio_row_without_figures_is_skipped():
    assert bench_quick.ratio_row("vs-sidekiq", [], 2.0, "min") == {
        "key": "vs-sidekiq", "median": None, "runs": [], "target": 2.0, "bound": "min",
        "verdict": "SKIP"}


def test_round_ratios_divide_each_step_by_its_reference():
    got = {"queued": {"rate": 8000.0, "redis_us": 30.0}, "bare": {"rate": 4000.0},
           "sidekiq": {"rate": 4000.0, "redis_us": 20.0}, "task": {"rate": 6000.0},
           "cpu": {"rate": 1700.0}, "log-text": {"rate": 7600.0}, "log-json": {"rate": 8000.0}}
    assert bench_quick.round_ratios(got, cores=2) == {
        "vs-bare": 2.0, "vs-sidekiq": 2.0, "task": 0.75, "cpu": 0.85, "log-text": 0.95,
        "log-json": 1.0, "redis-cpu": 1.5}


def test_round_ratios_without_sidekiq_leave_its_rows_out():
    got = {"queued": {"rate": 8000.0, "redis_us": 30.0}, "bare": {"rate": 4000.0}}
    assert bench_quick.round_ratios(got, cores=2) == {"vs-bare": 2.0}


def test_table_has_a_row_per_ratio_with_its_target_and_verdict():
    rows = [bench_quick.ratio_row(key, [1.0], target, bound)
            for key, _, target, bound in bench_quick.RATIOS]
    lines = bench_quick.table(rows).splitlines()
    assert len(lines) == 2 + len(bench_quick.RATIOS)
    assert lines[2] == "| queued -c 2 ÷ the bare BRPOP loop, jobs/s | 1.000 | 1.00 | ≥ 1.3 | MISS |"
    assert lines[-1] == ("| Redis CPU per job, queued -c 2 ÷ Sidekiq -c 10 | 1.000 | 1.00 | ≤ 1 "
                         "| PASS |")


def test_cat_sink_counts_the_lines_a_child_wrote_to_stderr():
    sink = CatSink()
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('a\\nb\\nc\\n' * 1000)"],
                   stderr=sink.child, check=True)
    assert sink.close() == 3000


def test_a_cpu_job_burns_its_milliseconds_of_thread_time():
    import time

    import bench_jobs
    start = time.thread_time()
    bench_jobs.burn(20)
    assert time.thread_time() - start >= 0.02


def test_stamps_count_the_finishes_cpu_jobs_wrote_a_file_per_process():
    import bench_jobs
    from benchlib import Stamps
    stamps = Stamps()
    try:
        bench_jobs.CpuJob.perform(None, 11, 0.01, stamps.dir)  # (the parent's file, then two)
        kids = []
        for _ in range(2):  # two processes, as two workers: a file each
            pid = os.fork()
            if pid == 0:
                try:
                    for _ in range(5):
                        bench_jobs.CpuJob.perform(None, 11, 0.01, stamps.dir)
                except BaseException:  # noqa: BLE001 - the parent's waitpid says it
                    os._exit(1)
                os._exit(0)
            kids.append(pid)
        for pid in kids:
            assert os.waitpid(pid, 0)[1] == 0
        assert len(os.listdir(stamps.dir)) == 3
        assert stamps.count() == 11 and len(stamps.times()) == 11
        with pytest.raises(TimeoutError):
            stamps.wait(12, timeout=0.05)
    finally:
        stamps.close()
    assert not os.path.exists(stamps.dir)


def test_stamps_give_rates_as_benchlib_rates_from_their_lines():
    from benchlib import Stamps
    stamps = Stamps()
    try:
        # rates as benchlib.rates: after the warm-up (the tenth job's finish to the last's)
        with open(os.path.join(stamps.dir, "1"), "wb") as f:
            f.write(b"".join(b"%.6f\n" % (1_800_000_000 + i / 4) for i in range(0, 20, 2)))
        with open(os.path.join(stamps.dir, "2"), "wb") as f:
            f.write(b"".join(b"%.6f\n" % (1_800_000_000 + i / 4) for i in range(1, 20, 2)))
        assert stamps.count() == 20
        # 20 jobs, every 0.25 s: the 2nd (index 1) ends the warm-up, the last is at 4.75 s
        assert stamps.rates(20) == (18 / 4.5, 20 / 4.75)
        with pytest.raises(RuntimeError):
            stamps.rates(19)  # (a stamp more or fewer than the jobs: no rate)
    finally:
        stamps.close()
    assert not os.path.exists(stamps.dir)
