"""``queuedctl limits``, ``locks``, ``unlock`` and ``stats``' counts of issue 21 (a real
subprocess, a real Redis), and the dashboard's Limits and Unique locks pages (Starlette's
TestClient): what they show, escaped; their POST refused without its CSRF token."""
from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

import queued
from ctlrun import ctl, ctl_json, ok, rows
from queued.admin.web import create_app
from queued.keys import Keys

K = Keys()


class Nightly(queued.Job):
    queued_options = {"unique_for": 600}

    def perform(self, day):
        pass


@pytest.fixture
def limiters(producer, r):
    """Three limiters with a known history: erp (concurrent of 2, one unit held now, one
    over-limit), stripe (bucket of 3 per hour: 2 granted) and <b>x</b> (a name to escape)."""
    erp = queued.Limiter.concurrent("erp", 2, wait_timeout=0)
    erp.acquire()
    erp.acquire()
    with pytest.raises(queued.OverLimit):
        erp.acquire()
    erp.release()
    stripe = queued.Limiter.bucket("stripe", 3, "hour")
    for _ in range(2):
        with stripe:
            pass
    with queued.Limiter.window("<b>x</b>", 5, 60):
        pass
    yield
    erp.release()


def test_limits_lists_each_limiter_with_its_use_and_counts(limiters, redis_url):
    table = {row[0]: row for row in rows(ok("limits", url=redis_url))}
    assert table["erp"][1:] == ["concurrent", "2", "1", "0", "1", "0"]
    assert table["stripe"][1:] == ["bucket hour", "3", "2", "0", "0", "-"]
    assert table["<b>x</b>"][1:4] == ["window 1m", "5", "1"]
    doc = {d["name"]: d for d in ctl_json("limits", url=redis_url)}
    assert (doc["erp"]["held"], doc["erp"]["overlimit"], doc["erp"]["in_use"]) == (2, 1, 1)
    assert doc["erp"]["definition"] == {"kind": "concurrent", "size": 2, "wait_timeout": 0.0,
                                        "reschedule": 20, "lock_timeout": 30.0}
    assert ctl_json("limits", "stripe", url=redis_url)[0]["in_use"] == 2
    missing = ctl("limits", "nope", url=redis_url)
    assert missing.returncode == 1 and "no limiter named nope" in missing.stderr


def test_locks_lists_the_unique_locks_and_unlock_gives_them_up(producer, r, redis_url):
    a = Nightly.perform_async("mon")
    b = Nightly.perform_async("tue")
    doc = {lock["jid"]: lock for lock in ctl_json("locks", url=redis_url)}
    assert set(doc) == {a, b} and all(599 < lock["ttl"] <= 600 for lock in doc.values())
    table = rows(ok("locks", url=redis_url))
    assert sorted(row[1] for row in table) == sorted([a, b])
    assert ok("unlock", doc[a]["digest"], url=redis_url) == "gave up 1 lock\n"
    again = ctl("unlock", doc[a]["digest"], url=redis_url)
    assert again.returncode == 1 and "no lock" in again.stderr
    assert Nightly.perform_async("mon") is not None  # its next push goes in
    refused = ctl("unlock", "--all", url=redis_url)  # not a terminal, no --yes
    assert refused.returncode == 2 and r.get(K.unique(doc[b]["digest"])) is not None
    assert ctl_json("unlock", "--all", "--yes", url=redis_url) == {"released": 2}
    assert ctl_json("locks", url=redis_url) == []
    bad = ctl("unlock", "not-a-digest", url=redis_url)
    assert bad.returncode == 2 and "not a lock digest" in bad.stderr


def test_stats_shows_queueds_own_counts(producer, r, redis_url):
    Nightly.perform_async("wed")
    Nightly.perform_async("wed")
    r.set(K.counter("expired"), 3)
    r.set(K.counter("overlimit"), 4)
    doc = ctl_json("stats", url=redis_url)
    assert (doc["expired"], doc["overlimit"], doc["unique_dropped"],
            doc["unique_deferred"]) == (3, 4, 1, 0)
    table = dict(row[:2] for row in rows(ok("stats", url=redis_url)) if len(row) >= 2)
    assert (table["Expired"], table["Over limit"], table["Duplicates dropped"]) == \
        ("3", "4", "1")


# --- the dashboard ---------------------------------------------------------------------------

@pytest.fixture
def web(r):
    with TestClient(create_app(r), base_url="http://localhost") as c:
        yield c


def _token(web, path) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', web.get(path).text).group(1)


def test_the_limits_page_shows_every_limiter_escaped(limiters, web):
    page = web.get("/limits").text
    assert '<tr data-limiter="erp">' in page and '<tr data-limiter="stripe">' in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    erp = page[page.index('data-limiter="erp"'):].split("</tr>")[0]
    assert '<td class="num in-use">1</td>' in erp
    assert '<td class="num overlimit">1</td>' in erp
    assert 'href="/limits"' in web.get("/").text  # in the menu


def test_a_lock_is_given_up_from_the_locks_page_only_with_its_token(producer, r, web):
    jid = Nightly.perform_async("thu")
    page = web.get("/locks").text
    digest = re.search(r'<tr data-digest="([0-9a-f]{40})">', page).group(1)
    assert f"<code>{jid}</code>" in page
    for form in ({"action": "release", "digest": digest},
                 {"action": "release", "digest": digest, "csrf_token": "forged"}):
        assert web.post("/locks", data=form).status_code == 403
        assert r.get(K.unique(digest)) == jid.encode()
    done = web.post("/locks", data={"action": "release", "digest": digest,
                                    "csrf_token": _token(web, "/locks")})
    assert done.status_code == 200 and f"gave up the lock {digest}" in done.text
    assert r.get(K.unique(digest)) is None


def test_prometheus_metrics_carry_the_counts_and_each_limiter(limiters, web, r):
    r.set(K.counter("expired"), 7)
    from prometheus_client.parser import text_string_to_metric_families
    families = {f.name: f for f in text_string_to_metric_families(web.get("/metrics").text)}
    assert families["queued_expired_jobs"].samples[0].value == 7
    sizes = {s.labels["limiter"]: s.value for s in families["queued_limiter_size"].samples}
    assert sizes == {"erp": 2, "stripe": 3, "<b>x</b>": 5}
    used = {s.labels["limiter"]: s.value for s in families["queued_limiter_in_use"].samples}
    assert used["erp"] == 1 and used["stripe"] == 2
