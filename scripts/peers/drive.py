"""The producer side of scripts/bench_peers.py for a Python system: enqueues through the
system's own API and prints one JSON line. Run with the interpreter that has the system
installed (the bench venv for the peers, queued's own for queued):

    drive.py MODULE fill one|bulk N TOTAL   N no-op jobs (stamping the last at TOTAL), one by one
                                            or in batches of 1,000; prints {"rate": jobs/s}
    drive.py MODULE pickup N GAP            N latency jobs, one every GAP seconds, each given
                                            time.time() just before its enqueue call
    drive.py MODULE schedule N START SPAN   N jobs due from now+START over SPAN seconds, through
                                            the system's delayed-job API, each given its due time

Rates are timed like throughput (SIDEKIQ_FORMAT.md section 9): from the end of the first call
(which opens connections) to the end of the last one, so start-up is not counted.
"""
import importlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BATCH = 1000


def fill(mod, mode, n, total):
    if mode == "one":
        calls = [(mod.one, (total,))] * n
        per_call = 1
    else:  # batches of 1,000, smaller for a small n so that one batch is left to time
        per_call = BATCH if n >= 2 * BATCH else max(1, (n + 1) // 2)
        calls = [(mod.bulk, (min(per_call, n - i), total)) for i in range(0, n, per_call)]
    fn, args = calls[0]
    fn(*args)
    t0 = time.perf_counter()
    for fn, args in calls[1:]:
        fn(*args)
    elapsed = time.perf_counter() - t0
    timed = n - min(per_call, n)
    return {"rate": timed / elapsed if timed and elapsed > 0 else None, "api": getattr(
        mod, "BULK_API", None) if mode == "bulk" else None}


def pickup(mod, n, gap):
    for _ in range(n):
        mod.pickup(time.time())
        time.sleep(gap)
    return {}


def schedule(mod, n, start, span):
    now = time.time()
    for i in range(n):
        mod.schedule(now + start + i * span / n)
    return {}


def main(argv):
    mod = importlib.import_module(argv[0])
    action, rest = argv[1], argv[2:]
    if action == "fill":
        out = fill(mod, rest[0], int(rest[1]), int(rest[2]))
    elif action == "pickup":
        out = pickup(mod, int(rest[0]), float(rest[1]))
    elif action == "schedule":
        out = schedule(mod, int(rest[0]), float(rest[1]), float(rest[2]))
    else:
        raise SystemExit(f"unknown action {action!r}")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
