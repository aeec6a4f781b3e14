"""queued.keys: Sidekiq's key names exactly (SIDEKIQ_FORMAT.md section 1), queued's own under
``queued:``, and redis-namespace's ``NS:`` prefix on every one of them."""
from __future__ import annotations

import pytest

from queued.keys import Keys

IDENT = "vm:12748:75b775097479"


def sidekiq_names(k: Keys) -> dict[str, str]:
    return {
        "queues": k.queues,
        "queue:critical": k.queue("critical"),
        "schedule": k.schedule,
        "retry": k.retry,
        "dead": k.dead,
        "stat:processed": k.stat("processed"),
        "stat:failed": k.stat("failed"),
        "stat:processed:2026-11-21": k.stat("processed", "2026-11-21"),
        "stat:failed:2026-11-21": k.stat("failed", "2026-11-21"),
        "processes": k.processes,
        IDENT: k.process(IDENT),
        f"{IDENT}:workers": k.workers(IDENT),
        f"{IDENT}-signals": k.signals(IDENT),
    }


def queued_names(k: Keys) -> list[str]:
    return [k.reserved(IDENT, 3), k.landing(IDENT, 3, "low"), k.masters, k.lease(IDENT),
            k.scheduler_leader]


def test_sidekiq_keys_without_a_namespace():
    for expected, got in sidekiq_names(Keys()).items():
        assert got == expected


@pytest.mark.parametrize("ns", [None, ""])
def test_no_namespace_means_no_prefix(ns):
    assert Keys(ns).queue("default") == "queue:default"


def test_sidekiq_keys_with_a_namespace():
    for expected, got in sidekiq_names(Keys("myapp")).items():
        assert got == "myapp:" + expected


def test_queued_keys_sit_under_queued():
    assert queued_names(Keys()) == [
        f"queued:reserved:{IDENT}:3", f"queued:landing:{IDENT}:3:low", "queued:masters",
        f"queued:lease:{IDENT}", "queued:scheduler-leader"]
    assert all(name.startswith("ns:queued:") for name in queued_names(Keys("ns")))
    assert [n[len("ns:"):] for n in queued_names(Keys("ns"))] == queued_names(Keys())


def test_no_queued_key_collides_with_a_sidekiq_key():
    k = Keys()
    sidekiq = set(sidekiq_names(k).values())
    assert not sidekiq & set(queued_names(k))
    assert not any(name.startswith(("queue:", "stat:")) for name in queued_names(k))


@pytest.mark.parametrize("ns", [None, "ns", "a:b"])
@pytest.mark.parametrize("queue", ["default", "low", "with:colon", "\u00e9t\u00e9", ""])
def test_queue_name_is_the_inverse_of_queue(ns, queue):
    k = Keys(ns)
    assert k.queue_name(k.queue(queue)) == queue


def test_utc_day():
    assert Keys.utc_day(0) == "1970-01-01"
    assert Keys.utc_day(1795235935.0895905) == "2026-11-21"
    assert Keys.utc_day(1795305599.9) == "2026-11-21"   # 23:59:59.9 UTC
    assert Keys.utc_day(1795305600.0) == "2026-11-22"
    assert len(Keys.utc_day()) == 10


def test_keys_are_cheap_and_immutable():
    k = Keys("ns")
    with pytest.raises(AttributeError):
        k.other = 1
