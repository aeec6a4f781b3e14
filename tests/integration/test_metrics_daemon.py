"""Per-class metrics of a real daemon: Prometheus at ``metrics: HOST:PORT`` (parsed with the
client library's parser) and Sidekiq's per-minute Redis keys, exact after workers die."""
from __future__ import annotations

import json
import os
import signal
import socket
import urllib.error
import urllib.request

import psutil
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import jobs
import metricsjobs
from conftest import free_port
from harness import counts, wait_for
from queued.errors import EXIT_CONFIG_ERROR
from queued.metricskeys import BUCKETS, histogram_fetch_args

REQUIRE = ("jobs.py", "metricsjobs.py")


def scrape(port: int) -> dict:
    """{sample name: {(class, queue) or (): value}} of what /metrics serves now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = dict(s.labels)
            key = tuple(labels.get(k) for k in ("class", "queue", "le", "slot") if k in labels)
            out.setdefault(s.name, {})[key] = s.value
    return out


def jobs_of(m: dict, name: str) -> dict:
    return {k: int(v) for k, v in m.get(name, {}).items()}


def redis_metrics(r) -> tuple[dict, dict]:
    """Sidekiq 8's minute hashes and histograms summed over every minute written:
    ({field: n}, {class: [26 buckets]}), when Sidekiq 7's are the same (else empty)."""
    def hashes(pattern: str) -> dict:
        fields: dict = {}
        for key in r.scan_iter(pattern):
            for f, v in r.hgetall(key).items():
                fields[f.decode()] = fields.get(f.decode(), 0) + int(v)
        return fields

    def grams(prefix: str) -> dict:
        out: dict = {}
        for klass in ("MetricsOk", "MetricsBad", "Gate", "Crash"):
            for key in r.scan_iter(f"{prefix}{klass}-*"):
                got = r.execute_command("BITFIELD_RO", key, *histogram_fetch_args())
                out[klass] = [a + b for a, b in zip(out.get(klass, [0] * 26), got)]
        return out

    # Sidekiq 8's, then Sidekiq 7's: one MULTI writes both, but a flush may land between the
    # two reads; then they differ and the caller's wait_for reads again
    sidekiq8 = hashes("j|" + "[0-9]" * 6 + "|*:[0-9][0-9]"), grams("h|")
    sidekiq7 = hashes("j|" + "[0-9]" * 8 + "|*"), grams("")
    return sidekiq8 if sidekiq8 == sidekiq7 else ({}, {})


def push(producer_cls, n, queue="default", *args):
    for _ in range(n):
        producer_cls.set(queue=queue).perform_async(*args)


def test_prometheus_and_redis_metrics_count_exactly_what_ran(daemon, producer, r):
    # Given a daemon serving Prometheus on a free loopback port, with two queues
    port = free_port()
    d = daemon(require=REQUIRE, concurrency=2, queues=["default", "low"],
               metrics=f"127.0.0.1:{port}")
    # When jobs of two classes run, some of them failing, one on another queue
    push(metricsjobs.MetricsOk, 6, "default", 0.05)
    push(metricsjobs.MetricsOk, 2, "low")
    push(metricsjobs.MetricsBad, 3)
    wait_for(lambda: r.get(metricsjobs.DONE) == b"8" and r.zcard("dead") == 3, 20,
             what="every job to end")
    # Then /metrics counts each (class, queue) exactly
    expected = {("MetricsOk", "default"): 6, ("MetricsOk", "low"): 2, ("MetricsBad", "default"): 3}
    m = wait_for(lambda: (lambda m: jobs_of(m, "queued_jobs_processed_total") == expected and m)(
        scrape(port)), 10, what="the processed counters")
    assert jobs_of(m, "queued_jobs_failed_total") == {
        ("MetricsOk", "default"): 0, ("MetricsOk", "low"): 0, ("MetricsBad", "default"): 3}
    # and the duration histograms hold the successful runs: each 50 ms sleep in a bucket at or
    # above 45-65 ms, none below; counts cumulative up to +Inf
    assert jobs_of(m, "queued_job_duration_seconds_count") == {
        ("MetricsOk", "default"): 6, ("MetricsOk", "low"): 2, ("MetricsBad", "default"): 0}
    buckets = m["queued_job_duration_seconds_bucket"]
    assert buckets[("MetricsOk", "default", "0.045")] == 0
    assert buckets[("MetricsOk", "default", "+Inf")] == 6
    assert len([k for k in buckets if k[:2] == ("MetricsOk", "low")]) == len(BUCKETS)
    assert 0.3 <= m["queued_job_duration_seconds_sum"][("MetricsOk", "default")] < 60
    assert m["queued_process_workers"][()] == 2 and m["queued_process_busy_workers"][()] == 0
    rss = m["queued_process_rss_bytes"]
    assert set(rss) == {("master",), ("0",), ("1",)} and all(v > 1e6 for v in rss.values())
    # And the heartbeat wrote Sidekiq's per-minute hashes and histograms: the same counts
    want = {"MetricsOk|p": 8, "MetricsBad|p": 3, "MetricsBad|f": 3}
    fields, grams = wait_for(lambda: (lambda f: {k: v for k, v in f[0].items()
                                                 if not k.endswith("|ms")} == want and f)(
        redis_metrics(r)), 10, what="the flush to Redis")
    assert fields["MetricsOk|ms"] >= 6 * 50 and "MetricsBad|ms" not in fields
    assert sum(grams["MetricsOk"]) == 8 and sum(grams["MetricsOk"][:3]) == 2  # the 50 ms ones
    assert "MetricsBad" not in grams  # failures have no time (Sidekiq's choice)
    # And the dashboard's reader (queuedctl web's Metrics page) sees the same, over 1 h and
    # over 24 h (from the 10-minute rollups)
    from queued.admin.metrics import MetricsReader
    from queued.keys import Keys
    reader = MetricsReader(r, Keys())
    for hours in (1, 24):
        seen = {c.klass: (c.processed, c.failed, c.ms) for c in reader.top(hours).classes}
        assert seen == {"MetricsOk": (8, 0, fields["MetricsOk|ms"]), "MetricsBad": (3, 3, 0)}
    assert sum(reader.histogram("MetricsOk")) == 8


def test_a_busy_worker_is_seen_and_the_server_stops_with_the_master(daemon, producer, r):
    port = free_port()
    d = daemon(concurrency=2, metrics=f"127.0.0.1:{port}")
    # the workers do not hold the listening socket: only the master listens
    listeners = [c for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                 and c.status == psutil.CONN_LISTEN]
    assert [c.pid for c in listeners] == [d.pid]
    jobs.Gate.perform_async("busy")
    wait_for(lambda: scrape(port)["queued_process_busy_workers"][()] == 1, what="one busy worker")
    jobs.open_gate(r, "busy")
    wait_for(lambda: scrape(port)["queued_process_busy_workers"][()] == 0, what="no busy worker")
    assert jobs_of(scrape(port), "queued_jobs_processed_total") == {("Gate", "default"): 1}
    # TERM: a clean exit, and the port is free
    assert d.stop() == 0
    with pytest.raises(urllib.error.URLError):
        scrape(port)
    with socket.socket() as s:  # (REUSEADDR: our scrapes' connections are in TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_counts_survive_workers_killed_between_jobs_and_under_a_job(daemon, producer, r):
    port = free_port()
    d = daemon(require=REQUIRE, concurrency=2, metrics=f"127.0.0.1:{port}")
    push(metricsjobs.MetricsOk, 5)
    wait_for(lambda: r.get(metricsjobs.DONE) == b"5", what="the first jobs")
    # When both workers are killed between jobs, and replaced
    old = set(d.worker_pids())
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: len(set(d.worker_pids()) - old) == 2, what="two new workers")
    # and a job kills its own worker once (requeued, it runs again and succeeds)
    jobs.Crash.perform_async("kill", 1)
    wait_for(lambda: sum(counts(r, jobs.DONE).values()) == 1, 20, what="the crash job's rerun")
    push(metricsjobs.MetricsOk, 4)
    wait_for(lambda: r.get(metricsjobs.DONE) == b"9", what="the later jobs")
    # Then nothing counted before the kills is lost, and the crashed run is not a failure
    want = {("MetricsOk", "default"): 9, ("Crash", "default"): 1}
    wait_for(lambda: jobs_of(scrape(port), "queued_jobs_processed_total") == want,
             what="every run counted")
    assert jobs_of(scrape(port), "queued_jobs_failed_total") == {
        ("MetricsOk", "default"): 0, ("Crash", "default"): 0}
    wait_for(lambda: (lambda f, g: f.get("MetricsOk|p") == 9 and sum(g["MetricsOk"]) == 9)(
        *redis_metrics(r)), what="Redis counts")


def test_counts_stay_exact_across_a_rolling_restart(daemon, producer, r):
    # Given a daemon with metrics whose workers are replaced one by one on HUP (the new one
    # starts in the spare slot, which has its own region, not the master's)
    port = free_port()
    d = daemon(require=REQUIRE, concurrency=2, metrics=f"127.0.0.1:{port}")
    push(metricsjobs.MetricsOk, 5)
    wait_for(lambda: r.get(metricsjobs.DONE) == b"5", what="the first jobs")
    old = set(d.worker_pids())
    # When it restarts its workers, and runs jobs before and after
    d.signal(signal.SIGHUP)
    wait_for(lambda: len(set(d.worker_pids()) - old) == 2 and not old & set(d.worker_pids()),
             30, what="both workers replaced")
    push(metricsjobs.MetricsOk, 6)
    wait_for(lambda: r.get(metricsjobs.DONE) == b"11", what="the later jobs")
    # Then every run is counted once, in Prometheus and in Redis
    wait_for(lambda: jobs_of(scrape(port), "queued_jobs_processed_total") ==
             {("MetricsOk", "default"): 11}, what="every run counted")
    wait_for(lambda: (lambda f, g: f.get("MetricsOk|p") == 11 and sum(g["MetricsOk"]) == 11)(
        *redis_metrics(r)), what="Redis counts")
    # And each new worker, the one forked into the spare slot included, records into a region
    # of its own, not the master's (the bug this test was added for: the spare slot's region
    # was the master's, two writers on one region, whose counts no job count above can tell
    # apart; the regions themselves can)
    new = set(d.worker_pids())

    def where() -> dict:
        metricsjobs.MetricsWhere.perform_async()
        seen = {int(k): json.loads(v) for k, v in r.hgetall(metricsjobs.WHERE).items()}
        return new <= set(seen) and seen
    seen = wait_for(where, 20, interval=0.1, what="a report from each new worker")
    for pid in new:
        regions, master = seen[pid]["regions"], seen[pid]["master"]
        assert master in regions and len(regions) == 2, (pid, seen[pid])


def test_a_job_the_master_fails_after_its_worker_died_is_counted_failed(daemon, producer, r):
    # Given a job that kills its worker every time (max_crashes 2: the master fails it)
    port = free_port()
    d = daemon(concurrency=1, max_crashes=2, metrics=f"127.0.0.1:{port}")
    jobs.Crash.set(retry=0).perform_async("kill")
    wait_for(lambda: r.zcard("dead") == 1, 20, what="the poison job in dead")
    # Then it is one processed, failed job of its class, as in stat:failed
    m = wait_for(lambda: (lambda m: m.get("queued_jobs_processed_total") and m)(scrape(port)),
                 what="a counter")
    assert jobs_of(m, "queued_jobs_processed_total") == {("Crash", "default"): 1}
    assert jobs_of(m, "queued_jobs_failed_total") == {("Crash", "default"): 1}
    wait_for(lambda: redis_metrics(r)[0] == {"Crash|p": 1, "Crash|f": 1}, what="Redis counts")
    assert r.get("stat:failed") == b"1"


def test_record_metrics_false_records_nothing_and_still_serves_the_gauges(daemon, producer, r):
    port = free_port()
    d = daemon(require=REQUIRE, concurrency=1, record_metrics=False, metrics=f"127.0.0.1:{port}")
    push(metricsjobs.MetricsOk, 3)
    wait_for(lambda: r.get(metricsjobs.DONE) == b"3", what="the jobs")
    wait_for(lambda: r.get("stat:processed") == b"3", what="a heartbeat after them")
    m = scrape(port)
    assert "queued_jobs_processed_total" not in m and m["queued_process_workers"][()] == 1
    assert list(r.scan_iter("j|*")) == []


def test_refused_at_boot_without_prometheus_client_or_when_the_port_is_taken(daemon, tmp_path):
    # Given prometheus_client not importable (a package of that name that fails to import)
    shadow = tmp_path / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no prometheus_client here')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", ""),
                                          os.path.dirname(os.path.dirname(jobs.__file__))])}
    d = daemon(metrics="127.0.0.1:9", env=env, wait=False)
    assert d.wait(30) == EXIT_CONFIG_ERROR
    assert (f"queued: {d.config}: metrics: serving Prometheus needs the prometheus_client "
            "package") in d.output()
    # And with the port taken by someone else
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        d = daemon(metrics=f"127.0.0.1:{port}", wait=False)
        assert d.wait(30) == EXIT_CONFIG_ERROR
    assert f"{d.config}: metrics: cannot listen on 127.0.0.1:{port}" in d.output()


# --- settings changed by HUP (issue 16.1.11: logged as applied, and nothing changed) -----------

def rewrite(d, **changes) -> None:
    """Change the daemon's config file as a deploy would (None: the key removed)."""
    with open(d.config) as f:
        data = yaml.safe_load(f)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    with open(d.config, "w") as f:
        yaml.safe_dump(data, f)


def refused(port: int) -> bool:
    try:
        scrape(port)
    except urllib.error.URLError:
        return True
    return False


def hup_and_wait(d, restarts: int) -> None:
    d.signal(signal.SIGHUP)
    wait_for(lambda: d.output().count("rolling restart done") == restarts, 30,
             what=f"rolling restart {restarts}")


def test_a_hup_that_moves_metrics_serves_the_new_address_and_frees_the_old(
        daemon, producer, r):
    # Given a daemon serving /metrics on one port, with jobs counted
    old, new = free_port(), free_port()
    d = daemon(require=REQUIRE, concurrency=2, metrics=f"127.0.0.1:{old}")
    push(metricsjobs.MetricsOk, 3)
    wait_for(lambda: jobs_of(scrape(old), "queued_jobs_processed_total") ==
             {("MetricsOk", "default"): 3}, what="the first counts")
    # When a deploy moves it to another port and the master gets HUP
    rewrite(d, metrics=f"127.0.0.1:{new}")
    hup_and_wait(d, 1)
    # Then the new port serves the same counts, and the old one is closed
    assert jobs_of(scrape(new), "queued_jobs_processed_total") == {("MetricsOk", "default"): 3}
    assert refused(old)
    push(metricsjobs.MetricsOk, 2)
    wait_for(lambda: jobs_of(scrape(new), "queued_jobs_processed_total") ==
             {("MetricsOk", "default"): 5}, what="later jobs counted on the new port")
    # When the new address cannot be had (taken): the whole reload is refused, naming it,
    # and /metrics stays where it was
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        rewrite(d, metrics=f"127.0.0.1:{busy}")
        d.signal(signal.SIGHUP)
        d.wait_log(f"metrics: cannot listen on 127.0.0.1:{busy}", 10)
    assert "SIGHUP refused" in d.output() and d.output().count("rolling restart done") == 1
    assert jobs_of(scrape(new), "queued_jobs_processed_total") == {("MetricsOk", "default"): 5}
    # When metrics: is removed, /metrics stops
    rewrite(d, metrics=None)
    hup_and_wait(d, 2)
    assert refused(new)
    assert d.stop() == 0


def test_a_hup_that_turns_record_metrics_on_then_off_takes_effect(daemon, producer, r):
    # Given a daemon that records no per-class metrics
    port = free_port()
    d = daemon(require=REQUIRE, concurrency=1, record_metrics=False, metrics=f"127.0.0.1:{port}")
    push(metricsjobs.MetricsOk, 2)
    wait_for(lambda: r.get(metricsjobs.DONE) == b"2", what="the first jobs")
    # When record_metrics is turned on by HUP
    rewrite(d, record_metrics=True)
    hup_and_wait(d, 1)
    push(metricsjobs.MetricsOk, 3)
    wait_for(lambda: r.get(metricsjobs.DONE) == b"5", what="the jobs after it")
    # Then the jobs after the restart are counted, in Prometheus and in Redis
    wait_for(lambda: jobs_of(scrape(port), "queued_jobs_processed_total") ==
             {("MetricsOk", "default"): 3}, what="counted from the restart on")
    wait_for(lambda: redis_metrics(r)[0].get("MetricsOk|p") == 3, what="Redis counts")
    # When it is turned off again: the workers forked from then on count nothing
    rewrite(d, record_metrics=False)
    hup_and_wait(d, 2)
    push(metricsjobs.MetricsOk, 4)
    wait_for(lambda: r.get(metricsjobs.DONE) == b"9", what="the last jobs")
    wait_for(lambda: r.get("stat:processed") == b"9", what="a heartbeat after them")
    assert jobs_of(scrape(port), "queued_jobs_processed_total") == {("MetricsOk", "default"): 3}
    assert redis_metrics(r)[0].get("MetricsOk|p") == 3
    assert d.stop() == 0


def test_every_job_whose_ack_went_out_is_counted_while_a_later_one_runs(daemon, producer, r):
    from ackjobs import Step, reserved_jids
    port = free_port()
    # Given one worker whose batches grow however long its jobs take (as in test_logs.py's
    # done-line test), jobs of 2 ms (so the acks of a batch's finished jobs go out every 20 ms
    # inside it), and the 60th, 28 jobs into a batch of 32, waiting on a gate
    jids = Step.perform_bulk([[i, "step" if i == 59 else None, 0.002] for i in range(100)])
    d = daemon(require=("ackjobs.py", "jobmods/long_batches.py"), concurrency=1,
               metrics=f"127.0.0.1:{port}")
    # When the gated job runs
    wait_for(lambda: r.hexists(jobs.RUNS, jids[59]), 10, what="the gated job running")
    # Then every job before it whose ack went out is counted already (a kill -9 now loses no
    # count of a job it does not run again); the batches before its own are 31 jobs
    acked = set(jids[:59]) - set(reserved_jids(r))
    processed = jobs_of(scrape(port), "queued_jobs_processed_total")[("Step", "default")]
    assert len(acked) > 31 and processed >= len(acked), (processed, len(acked))
    jobs.open_gate(r, "step")
    wait_for(lambda: r.hlen(jobs.RUNS) == 100, 10, what="every job run")
    assert d.stop() == 0
