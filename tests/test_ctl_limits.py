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


# --- odd keys (red team rt3 #8) ---------------------------------------------------------------

@pytest.fixture
def odd_keys(limiters, producer, r):
    """What any Redis client could leave under queued's prefixes, beside the good limiters and
    one good lock: a limiter whose key is a string, one whose count is not a number, one whose
    definition is not JSON, one named in bytes that are not UTF-8 (with its own hash), and
    lock keys of another type and with a name that is not UTF-8."""
    now = 1_800_000_000
    r.zadd(K.limiters, {b"wrongtype": now, b"nan": now, b"notjson": now, b"bin\xff": now})
    r.set(K.limiter("wrongtype"), "a string")
    r.hset(K.limiter("nan"), mapping={"def": '{"kind":"window","size":4,"interval":"<i>"}',
                                      "held": "NaN", "waited": 3})
    r.hset(K.limiter("notjson"), mapping={"def": "not json{", "held": 2})
    r.hset(b"queued:limiter:{bin\xff}", mapping={
        "def": '{"kind":"concurrent","size":7,"lock_timeout":"soon"}', "held": 9})
    good = Nightly.perform_async("odd")
    r.hset(K.unique("wrongtype"), "a", "b")
    r.set(b"queued:unique:\xff\xfe", b"j\xff", ex=100)
    return good


def test_queuedctl_lists_every_limiter_and_lock_and_marks_the_odd_ones(odd_keys, redis_url):
    # (one such key made `queuedctl limits` and `locks` fail whole: WRONGTYPE, "NaN")
    doc = {d["name"]: d for d in ctl_json("limits", url=redis_url)}
    assert set(doc) == {"erp", "stripe", "<b>x</b>", "wrongtype", "nan", "notjson", "bin\\xff"}
    assert {n for n, d in doc.items() if d["trouble"]} == {"wrongtype", "nan", "notjson",
                                                            "bin\\xff"}
    assert "not a limiter's hash" in doc["wrongtype"]["trouble"]
    assert "'held' is not a whole number (NaN)" in doc["nan"]["trouble"]
    assert (doc["nan"]["size"], doc["nan"]["waited"]) == (4, 3)
    assert "definition is not what queued writes" in doc["notjson"]["trouble"]
    # the name that is not UTF-8 is read from its own keys: kind, size and counts
    assert (doc["bin\\xff"]["kind"], doc["bin\\xff"]["size"], doc["bin\\xff"]["held"]) == \
        ("concurrent", 7, 9)
    assert "lock_timeout" in doc["bin\\xff"]["trouble"]
    assert doc["erp"]["trouble"] is None and doc["erp"]["in_use"] == 1
    listing = ctl("limits", url=redis_url)
    assert listing.returncode == 0
    table = {row[0]: row for row in rows(listing.stdout)}
    assert table["erp"][1:4] == ["concurrent", "2", "1"]
    assert table["wrongtype"][1] == "?" and table["bin\\xff"][1:3] == ["concurrent", "7"]
    assert sorted(line.split(":")[1].strip() for line in listing.stderr.splitlines()) == \
        sorted(f"limiter {n}" for n in ("wrongtype", "nan", "notjson", "bin\\xff"))
    # locks: the good one, and the two odd keys marked
    locks = {lock["digest"]: lock for lock in ctl_json("locks", url=redis_url)}
    assert len(locks) == 3
    assert "another type" in locks["wrongtype"]["trouble"]
    assert (locks["\\xff\\xfe"]["jid"], locks["\\xff\\xfe"]["trouble"]) == ("j\\xff", None)
    assert [lock["jid"] for d, lock in locks.items() if len(d) == 40] == [odd_keys]
    assert ctl("locks", url=redis_url).returncode == 0


def test_the_limits_and_locks_pages_list_every_key_and_mark_the_odd_ones(odd_keys, web, r):
    # (a count "NaN" and a lock key that is not UTF-8 made them a 500)
    page = web.get("/limits")
    assert page.status_code == 200
    for name in ("erp", "wrongtype", "nan", "notjson", "bin\\xff"):
        assert f'<tr data-limiter="{name}"' in page.text, name
    nan = page.text[page.text.index('data-limiter="nan"'):].split("</tr>")[0]
    assert 'class="odd"' in nan and "is not a whole number" in nan
    assert "interval is not a number of seconds (&#39;&lt;i&gt;&#39;)" in nan
    assert "<i>" not in nan
    locks = web.get("/locks")
    assert locks.status_code == 200
    assert '<tr data-digest="wrongtype" class="odd">' in locks.text
    # And the lock whose name is not UTF-8 is given up from the page (its exact name sent)
    row = locks.text[locks.text.index('data-digest="\\xff\\xfe"'):].split("</tr>")[0]
    field = re.search(r'<input type="hidden" name="(digest~?)" value="([^"]*)">', row)
    done = web.post("/locks", data={"action": "release", field.group(1): field.group(2),
                                    "csrf_token": _token(web, "/locks")})
    assert done.status_code == 200
    assert r.exists(b"queued:unique:\xff\xfe") == 0
    # And /metrics still answers, the odd limiters with what could be read
    assert web.get("/metrics").status_code == 200
