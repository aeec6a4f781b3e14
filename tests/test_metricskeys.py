"""queued.metricskeys: Sidekiq 8's and Sidekiq 7's metrics layouts (lib/sidekiq/metrics/
{tracking,shared}.rb of 8.0+ and of 7.0-7.3), checked against the values Sidekiq's own
strftime formats give, under a namespace too."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from queued import metricskeys as mk
from queued.keys import Keys

CASES = [
    # (time, Sidekiq 8: "j|%y%m%d|%-H:%M", "h|K-%-d-%-H:%-M";
    #        Sidekiq 7: "j|%Y%m%d|%-H:%-M", "K-%d-%H:%-M")
    (datetime(2026, 11, 3, 9, 5, 59, tzinfo=timezone.utc),
     "j|261103|9:05", "h|HardJob-3-9:5", "j|20261103|9:5", "HardJob-03-09:5"),
    (datetime(2026, 11, 23, 0, 0), "j|261123|0:00", "h|HardJob-23-0:0", "j|20261123|0:0",
     "HardJob-23-00:0"),
    (datetime(2026, 1, 31, 23, 59), "j|260131|23:59", "h|HardJob-31-23:59", "j|20260131|23:59",
     "HardJob-31-23:59"),
    # an aware time elsewhere is turned to UTC first (Sidekiq's metrics are UTC only)
    (datetime(2026, 11, 24, 1, 7, tzinfo=timezone(timedelta(hours=2))), "j|261123|23:07",
     "h|HardJob-23-23:7", "j|20261123|23:7", "HardJob-23-23:7"),
]


@pytest.mark.parametrize("t, minute, histogram, minute7, histogram7", CASES)
def test_minute_and_histogram_keys_are_sidekiqs(t, minute, histogram, minute7, histogram7):
    assert (mk.minute_key(t), mk.histogram_key("HardJob", t)) == (minute, histogram)
    assert (mk.minute_key_v7(t), mk.histogram_key_v7("HardJob", t)) == (minute7, histogram7)
    epoch = (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()
    assert mk.minute_key(epoch) == minute and mk.histogram_key_v7("HardJob", epoch) == histogram7


def test_the_rollup_is_the_minute_key_without_its_last_digit():
    # Sidekiq 8: "250214|8:4" is the 10 minute bucket for Feb 14 2025, 08:43
    assert mk.rollup_key(datetime(2025, 2, 14, 8, 43)) == "j|250214|8:4"
    assert mk.rollup_key(datetime(2025, 2, 14, 8, 3)) == "j|250214|8:0"


def test_keys_prefix_the_namespace_like_every_other_key():
    t = datetime(2026, 11, 23, 9, 5)
    assert Keys().metrics_minute(t) == "j|261123|9:05"
    assert Keys("ns").metrics_minute(t) == "ns:j|261123|9:05"
    assert Keys("ns").metrics_rollup(t) == "ns:j|261123|9:0"
    assert Keys("ns").metrics_histogram("A::B", t) == "ns:h|A::B-23-9:5"
    assert Keys("ns").metrics_minute_v7(t) == "ns:j|20261123|9:5"
    assert Keys("ns").metrics_histogram_v7("A::B", t) == "ns:A::B-23-09:5"


def test_buckets_are_sidekiqs_26_and_a_time_goes_in_the_first_bound_above_it():
    assert len(mk.BUCKETS) == len(mk.BUCKET_LABELS) == 26
    assert mk.BUCKETS[:3] == (20, 30, 45) and mk.BUCKETS[-2] == 335000
    assert mk.BUCKETS[-1] == float("inf") and list(mk.BUCKETS) == sorted(mk.BUCKETS)
    # Sidekiq's record_time: `break idx if ms < BUCKET_INTERVALS[idx]`
    assert [mk.bucket_index(ms) for ms in (0, 19.9, 20, 29, 280, 334999, 335000, 10**9)] == \
        [0, 0, 1, 1, 7, 24, 25, 25]


def test_fields_ttls_and_the_fetch_arguments():
    assert mk.field("HardJob", mk.FIELD_PROCESSED) == "HardJob|p"
    assert (mk.FIELD_FAILED, mk.FIELD_MS) == ("f", "ms")
    assert mk.MINUTE_TTL == mk.HISTOGRAM_TTL == 8 * 3600 and mk.ROLLUP_TTL == 3 * 86400
    args = mk.histogram_fetch_args()
    assert args[:6] == ["GET", "u16", "#0", "GET", "u16", "#1"] and len(args) == 78
