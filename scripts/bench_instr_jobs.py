"""The job file scripts/bench_instr.py gives the daemons it runs under callgrind: the no-op job of
scripts/bench_jobs.py, and the worker's time-based choices pinned to what they are in a native
throughput run, whatever the valgrind slow-down (x40-50) does to the clock:

- a batch grows up to ``prefetch`` while jobs are short (worker.BATCH_SPAN: under valgrind a no-op
  job takes ~5 ms, so batches would stay at 1);
- the acks of a batch ride with the next reserve call while the class is known to be short
  (runner.SLOW_JOB), and none go out inside a batch (worker.ACK_AFTER: 20 ms, 400 no-op jobs
  natively, more than a batch holds; under valgrind every 4-5 jobs, each time with a write of
  the done lines so far);
- the master gives back a batch held behind a job that ran 20 ms (giveback.HOLD_LIMIT);
- the clock of a done line (log.py's ``time``): JobLog keeps a line's head while the
  millisecond it names lasts, ~10 lines natively at 10,000 jobs/s a worker, where under
  valgrind each line falls in a millisecond of its own; the clock it reads here moves 0.1 ms
  a reading (a C callable: no Python call of ours is counted).

Each is patched in whichever module holds it in the tree being measured (queued/worker.py
before the move into queued/server/), so the same file serves any commit since the engine's
first release. ``BENCH_INSTR_DROP`` (a comma list, see DROPS) replaces one piece of the
per-job path with nothing, to weigh it: the instructions it costs are the difference.
"""
import importlib
import itertools
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_jobs import BenchJob, CpuJob  # noqa: E402,F401 - the jobs the daemon runs


FOREVER = 1e9


def _patch(module: str, name: str, value) -> None:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    if hasattr(mod, name):
        setattr(mod, name, value)


for _module in ("queued.server.worker", "queued.worker"):
    _patch(_module, "BATCH_SPAN", FOREVER)
for _module in ("queued.server.runner", "queued.worker"):
    _patch(_module, "SLOW_JOB", FOREVER)
for _module in ("queued.server.worker", "queued.worker"):
    _patch(_module, "ACK_AFTER", FOREVER)
_patch("queued.server.giveback", "HOLD_LIMIT", FOREVER)

#: Seconds between two done lines of a worker natively (two workers, ~20,000 jobs/s).
LINE_SPACING = 1e-4


def _log_clock(real):
    """log.py's ``time`` module with ``time()`` read off a clock moving LINE_SPACING a call. A
    module, as the real one is: a read of an instance's attribute through a class with
    ``__getattr__`` takes the interpreter's generic path, ~340 instructions a line that a
    native run does not spend (the pin itself had been counted as the line's)."""
    clock = types.ModuleType(real.__name__)
    clock.__dict__.update((k, v) for k, v in vars(real).items() if not k.startswith("__"))
    clock.time = itertools.count(real.time(), LINE_SPACING).__next__
    return clock


for _module in ("queued.server.log", "queued.log"):
    _patch(_module, "time", _log_clock(time))


def _nothing(*args, **kwargs):
    return None


def _drop(what: str) -> None:
    """Replace one piece of the per-job path with a no-op (current tree only)."""
    from queued.server import log as logsetup, runner, slots, titles
    if what == "title":
        titles.WorkerTitle.busy = titles.WorkerTitle.idle = _nothing
    elif what == "context":
        logsetup.set_context = _nothing
        runner.logsetup.set_context = _nothing
    elif what == "slots":
        slots.SlotWriter.begin = slots.SlotWriter.end = _nothing
    elif what == "metrics":
        from queued.server import metrics
        metrics.Recorder.record = _nothing
    elif what == "giveback":
        from queued.server import giveback
        giveback.GiveBack.revoked = lambda self, slot, started=None: False
    elif what == "middleware":
        from queued import middleware
        middleware.Chain.invoke = lambda self, job, msg, queue, final: final()
    else:
        raise SystemExit(f"BENCH_INSTR_DROP: unknown piece {what!r}")


for _what in filter(None, os.environ.get("BENCH_INSTR_DROP", "").split(",")):
    _drop(_what)
