"""queued/server/metrics.py (the shared-memory table) and metricsflush.py (its flush to Redis in
Sidekiq 8's and 7's layouts): exact counts, buckets, a full table, writers replaced, a real fork."""
from __future__ import annotations

import os
from datetime import datetime, timezone

import pytest

from queued.keys import Keys
from queued.metricskeys import HISTOGRAM_TTL, MINUTE_TTL, ROLLUP_TTL, histogram_fetch_args
from queued.server.metrics import OTHER, READ_TRIES, MetricsTable
from queued.server.metricsflush import Flusher


def row(processed=0, failed=0, micros=0, buckets=None):
    b = [0] * 26
    for i, n in (buckets or {}).items():
        b[i] = n
    return [processed, failed, micros, *b]


def test_a_recorder_counts_processed_failed_time_and_the_bucket_of_each_success():
    table = MetricsTable(3)
    rec = table.recorder(0)
    rec.record({"class": "A"}, "default", 0.010, False)   # 10 ms: bucket 0 (< 20 ms)
    rec.record({"class": "A"}, "default", 0.280, False)   # 280 ms: bucket 7 (< 335 ms)
    rec.record({"class": "A"}, "default", 400.0, False)   # past 335 s: the "Slow" bucket
    rec.record({"class": "A"}, "default", 9.0, True)      # a failure: no time, no bucket
    rec.record({"class": "A"}, "low", 0.0, False)
    # ActiveJob's wrapped class is the metrics class (Sidekiq's `hash["wrapped"] || klass`)
    rec.record({"class": "JobWrapper", "wrapped": "Mailer"}, "mail", 0.001, False)
    assert table.reader().totals() == {
        ("A", "default"): row(4, 1, 400_290_000, {0: 1, 7: 1, 25: 1}),
        ("A", "low"): row(1, 0, 0, {0: 1}),
        ("Mailer", "mail"): row(1, 0, 1000, {0: 1}),
    }


def test_a_held_recorder_writes_what_a_recorder_writes_when_it_flushes_and_not_before():
    # Given a worker's held recorder (one job at a time) and a direct one, fed the same jobs
    table = MetricsTable(3)
    held, direct = table.recorder(0, held=True), table.recorder(1)
    ended = [({"class": "A"}, "default", 0.010, False), ({"class": "A"}, "default", 9.0, True),
             ({"class": "A"}, "default", 400.0, False), ({"class": "B"}, "low", 0.0, False),
             ({"class": "JobWrapper", "wrapped": "Mailer"}, "mail", 0.001, False)]
    for job in ended:
        held.record(*job)
        direct.record(*job)
    # Then nothing of the held one is in its region until it flushes
    assert set(table.reader().totals()) == {("A", "default"), ("B", "low"), ("Mailer", "mail")}
    assert table.reader().totals()[("A", "default")] == row(3, 1, 400_010_000, {0: 1, 25: 1})
    held.flush()
    # And then both regions hold the same counts (the totals are twice the direct one's)
    totals = table.reader().totals()
    assert totals == {("A", "default"): row(6, 2, 800_020_000, {0: 2, 25: 2}),
                      ("B", "low"): row(2, 0, 0, {0: 2}),
                      ("Mailer", "mail"): row(2, 0, 2000, {0: 2})}
    # And a second flush with nothing held writes nothing more
    held.flush()
    assert table.reader().totals() == totals


@pytest.mark.parametrize("held", [False, True])
def test_a_negative_run_time_counts_as_none(held):
    # (a monotonic clock stepped back, as a faked one can: the worker died storing a negative
    # count in an unsigned word, RT11)
    table = MetricsTable(3)
    rec = table.recorder(0, held=held)
    rec.record({"class": "A"}, "default", -2.0, False)
    rec.record({"class": "A"}, "default", 0.010, False)
    if held:
        rec.flush()
    assert table.reader().totals() == {("A", "default"): row(2, 0, 10_000, {0: 2})}


def test_regions_of_several_slots_and_the_masters_are_summed_by_class_and_queue():
    table = MetricsTable(3)
    for region in range(3):
        table.recorder(region).record({"class": "A"}, "q", 0.03, region == 2)
    assert table.reader().totals() == {("A", "q"): row(3, 1, 60_000, {2: 2})}


def test_a_replacing_writer_carries_on_from_its_slots_counts_without_a_second_entry():
    # Given a worker that counted jobs of two classes, then died
    table = MetricsTable(2)
    first = table.recorder(0)
    for klass in ("A", "B", "A"):
        first.record({"class": klass}, "q", 0.0, False)
    # When its replacement (a new process in the same slot) counts more of the same
    second = table.recorder(0)
    second.record({"class": "A"}, "q", 0.0, True)
    second.record({"class": "C"}, "q", 0.0, False)
    # Then nothing was lost, and each pair still has one entry in the slot's region
    assert table.reader().totals() == {("A", "q"): row(3, 1, 0, {0: 2}),
                                       ("B", "q"): row(1, 0, 0, {0: 1}),
                                       ("C", "q"): row(1, 0, 0, {0: 1})}
    assert table.words[table.seq_at(0) + 1] == 3


def test_a_full_region_counts_new_pairs_under_other_and_stays_bounded():
    # Given a region with room for 3 pairs (its 4th entry is OTHER)
    table = MetricsTable(2, capacity=4)
    rec = table.recorder(0)
    for i in range(6):  # 6 classes, and the first again
        rec.record({"class": f"C{i}"}, "q", 0.0, i == 5)
    rec.record({"class": "C0"}, "q", 0.0, False)
    # Then the first 3 keep their own counts and everything past them is OTHER's
    assert table.reader().totals() == {("C0", "q"): row(2, 0, 0, {0: 2}),
                                       ("C1", "q"): row(1, 0, 0, {0: 1}),
                                       ("C2", "q"): row(1, 0, 0, {0: 1}),
                                       OTHER: row(3, 1, 0, {0: 2})}
    # and neither the region nor the writer's index grew past its capacity
    assert table.words[table.seq_at(0) + 1] == 3 and sum(map(len, rec.index.values())) == 3


def test_long_and_odd_class_names_are_cut_to_fit_and_counted_once():
    table = MetricsTable(2)
    rec = table.recorder(0)
    long = "N" * 500
    cut = "a" + "é" * 300  # cut in the middle of a two-byte character
    for replaced in (False, True):  # then a replacement, the same classes
        writer = table.recorder(0) if replaced else rec
        writer.record({"class": long}, "q", 0.0, False)
        writer.record({"class": cut}, "q", 0.0, False)
    rec.record({"class": "J", "wrapped": ["not", "a", "string"]}, "q", 0.0, False)
    totals = table.reader().totals()
    assert totals[("N" * 190, "q")][0] == 2
    assert totals[("a" + "é" * 94 + "\ufffd", "q")][0] == 2
    assert totals[("['not', 'a', 'string']", "q")][0] == 1
    assert table.words[table.seq_at(0) + 1] == 3


def test_a_writer_killed_inside_a_record_does_not_hang_the_reader_and_is_fixed_by_the_next():
    table = MetricsTable(2)
    table.recorder(0).record({"class": "A"}, "q", 0.0, False)
    table.words[table.seq_at(0)] += 1  # odd: killed between its two sequence stores
    assert table.reader().totals()[("A", "q")][0] == 1  # read as it is after READ_TRIES
    assert READ_TRIES > 0
    table.recorder(0).record({"class": "A"}, "q", 0.0, False)
    assert table.words[table.seq_at(0)] % 2 == 0
    assert table.reader().totals()[("A", "q")][0] == 2


def test_a_forked_worker_writes_what_the_parent_reads():
    table = MetricsTable(3)
    pid = os.fork()
    if pid == 0:  # the child: a worker of slot 1
        try:
            rec = table.recorder(1)
            for i in range(1000):
                rec.record({"class": "Forked"}, "q", 0.001, i % 10 == 0)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert table.reader().totals() == {("Forked", "q"): row(1000, 100, 900_000, {0: 900})}


# --- the flush to Redis (a real redis-server) ---------------------------------------------------

NOW = datetime(2026, 11, 23, 9, 5, 30, tzinfo=timezone.utc).timestamp()


def hash_of(r, key):
    return {k.decode(): int(v) for k, v in r.hgetall(key).items()}


def test_a_flush_writes_sidekiq_8s_and_7s_hashes_and_histograms_with_their_ttls(r):
    table = MetricsTable(2)
    rec = table.recorder(0)
    for seconds in (0.010, 0.0105, 0.050):
        rec.record({"class": "Hard"}, "default", seconds, False)
    rec.record({"class": "Hard"}, "low", 1.0, True)
    rec.record({"class": "Soft"}, "low", 0.0004, False)
    assert Flusher(r, Keys(), table).flush(NOW) == 2
    # processed/failed per class (over its queues); ms of the successes only; in Sidekiq 8's
    # minute and 10-minute hashes and in Sidekiq 7's minute hash alike
    want = {"Hard|p": 4, "Hard|f": 1, "Hard|ms": 70, "Soft|p": 1}
    for key in ("j|261123|9:05", "j|261123|9:0", "j|20261123|9:5"):
        assert hash_of(r, key) == want
    for key in ("h|Hard-23-9:5", "Hard-23-09:5"):  # Sidekiq 8's, Sidekiq 7's
        assert r.bitfield_ro(key, "u16", 0, [("u16", f"#{i}") for i in range(1, 26)]) == \
            [2, 0, 0, 1] + [0] * 22
    assert r.execute_command("BITFIELD_RO", "h|Soft-23-9:5", *histogram_fetch_args()) == \
        [1] + [0] * 25
    for key, ttl in (("j|261123|9:05", MINUTE_TTL), ("j|261123|9:0", ROLLUP_TTL),
                     ("j|20261123|9:5", MINUTE_TTL), ("h|Hard-23-9:5", HISTOGRAM_TTL),
                     ("Hard-23-09:5", HISTOGRAM_TTL)):
        assert ttl - 5 < r.ttl(key) <= ttl


def test_later_flushes_write_only_the_difference_in_their_own_minute_under_the_namespace(r):
    table = MetricsTable(2)
    rec = table.recorder(0)
    flusher = Flusher(r, Keys("ns"), table)
    rec.record({"class": "A"}, "q", 0.0006, False)
    flusher.flush(NOW)
    assert flusher.flush(NOW + 1) == 0  # nothing new: nothing written
    # 0.6 ms + 0.6 ms: the second flush adds the 1 whole millisecond the total reached
    rec.record({"class": "A"}, "q", 0.0006, False)
    rec.record({"class": "A"}, "q", 0.0, True)
    assert flusher.flush(NOW + 60) == 1
    assert hash_of(r, "ns:j|261123|9:05") == {"A|p": 1}
    assert hash_of(r, "ns:j|261123|9:06") == {"A|p": 2, "A|f": 1, "A|ms": 1}
    assert hash_of(r, "ns:j|261123|9:0") == {"A|p": 3, "A|f": 1, "A|ms": 1}
    assert r.execute_command("BITFIELD_RO", "ns:h|A-23-9:6", "GET", "u16", "#0") == [1]
    assert set(r.keys("*")) == {
        b"ns:j|261123|9:05", b"ns:j|261123|9:06", b"ns:j|261123|9:0", b"ns:h|A-23-9:5",
        b"ns:h|A-23-9:6", b"ns:j|20261123|9:5", b"ns:j|20261123|9:6", b"ns:A-23-09:5",
        b"ns:A-23-09:6"}


def test_a_histogram_bucket_saturates_at_65535_as_sidekiqs_overflow_sat(r):
    table = MetricsTable(2)
    rec = table.recorder(0)
    for _ in range(70000):
        rec.record({"class": "Many"}, "q", 0.0, False)
    Flusher(r, Keys(), table).flush(NOW)
    assert r.execute_command("BITFIELD_RO", "h|Many-23-9:5", "GET", "u16", "#0") == [65535]
    assert hash_of(r, "j|261123|9:05")["Many|p"] == 70000


# --- the settings ----------------------------------------------------------------------------

def test_the_metrics_setting_takes_host_and_port_and_is_off_by_default():
    from queued import config
    assert config.from_dict({}).metrics is None and config.from_dict({}).record_metrics is True
    for text, want in (("127.0.0.1:9394", ("127.0.0.1", 9394)), ("[::1]:80", ("::1", 80)),
                       ("localhost:65535", ("localhost", 65535))):
        assert config.from_dict({"metrics": text}).metrics == want


def test_a_bad_metrics_address_is_a_config_error_naming_the_file_and_the_key():
    import pytest
    from queued import config
    for bad in ("9394", 9394, ":9394", "localhost", "h:0", "h:65536", "a b:1", "[::1]"):
        with pytest.raises(config.ConfigError) as e:
            config.from_dict({"metrics": bad}, source="/etc/queued/sidekiq.yml")
        assert str(e.value).startswith("/etc/queued/sidekiq.yml: metrics: expected HOST:PORT")


@pytest.mark.parametrize("concurrency", [1, 4])
def test_every_worker_slot_the_spare_included_has_a_region_apart_from_the_masters(concurrency):
    from types import SimpleNamespace
    from queued.server.jobmetrics import JobMetrics
    from queued.server.slots import slot_count
    config = SimpleNamespace(process_count=concurrency, record_metrics=True, metrics=None)
    table = JobMetrics(config, None, None, None).table
    # (a worker in the spare slot of a rolling restart writing into the master's region
    # would be two writers on one region)
    assert table.master_region not in range(slot_count(concurrency))
    assert table.regions == slot_count(concurrency) + 1
