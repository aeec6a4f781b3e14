"""The dashboard's HTTP side without a browser (Starlette's TestClient, a real redis-server):
CSRF on every POST, security headers, basic auth, mounting as ASGI and WSGI, the bounded
search, the per-class metrics reader on Sidekiq 7's layout, the Prometheus gauges parsed with
the client library's parser, and ``queuedctl web``'s errors."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from harness import ROOT
from queued.admin import metrics as m
from queued.admin.web import create_app, create_wsgi_app
from queued.admin.web import pages_jobs
from queued.admin.web.security import CSP


def dead_job(jid, klass="X", args=(1,), error="Boom") -> bytes:
    return json.dumps({"class": klass, "args": list(args), "jid": jid, "queue": "default",
                       "error_class": error, "error_message": "m", "retry_count": 1}).encode()


@pytest.fixture
def client(r):
    with TestClient(create_app(r)) as c:
        yield c


def token(client, path="/dead") -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).text).group(1)


# --- CSRF, GET, headers, auth -------------------------------------------------------------------

POSTS = [("/dead", {"action": "delete", "scope": "all"}),
         ("/retries", {"action": "delete", "scope": "all"}),
         ("/queues/default", {"action": "clear"}),
         ("/busy", {"action": "stop", "identity": "*"})]


@pytest.mark.parametrize("path,form", POSTS)
def test_every_post_without_a_valid_token_is_refused_and_changes_nothing(client, r, path, form):
    r.zadd("dead", {dead_job("a"): 1})
    r.zadd("retry", {dead_job("b"): 1})
    r.lpush("queue:default", dead_job("c"))
    r.sadd("queues", "default")
    good = token(client)
    other = TestClient(client.app)  # another browser: its own cookie
    forged = token(other)
    for data in (form, {**form, "csrf_token": "x"}, {**form, "csrf_token": forged}):
        assert client.post(path, data=data, follow_redirects=False).status_code == 403
    assert (r.zcard("dead"), r.zcard("retry"), r.llen("queue:default")) == (1, 1, 1)
    assert r.llen(b"signals") == 0
    # and with this browser's own token it is done
    assert client.post(path, data={**form, "csrf_token": good},
                       follow_redirects=False).status_code == 303


def test_get_never_acts(client, r):
    r.zadd("dead", {dead_job("a"): 1})
    client.get("/dead", params={"action": "delete", "scope": "all"})
    client.get("/queues/default", params={"action": "clear"})
    assert r.zcard("dead") == 1


def test_security_headers_and_the_csrf_cookie(client):
    response = client.get("/")
    assert response.headers["content-security-policy"] == CSP
    assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
    assert response.headers["x-frame-options"] == "DENY"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "<script>" not in re.sub(r"<script src=[^>]+></script>", "", response.text)


def test_basic_auth_when_asked(r):
    c = TestClient(create_app(r, auth="admin:s3cret"))
    assert c.get("/").status_code == 401
    assert c.get("/", auth=("admin", "wrong")).status_code == 401
    assert c.get("/", auth=("admin", "s3cret")).status_code == 200


def test_mounted_in_a_starlette_site_its_links_carry_the_prefix(r):
    site = Starlette(routes=[Mount("/ops/queued", app=create_app(r))])
    c = TestClient(site)
    page = c.get("/ops/queued/queues")
    assert page.status_code == 200
    assert 'href="/ops/queued/static/app.css"' in page.text
    assert 'href="/ops/queued/dead"' in page.text
    assert c.get("/ops/queued/static/app.js").status_code == 200


def test_the_wsgi_app_serves_the_same_pages(r):
    r.zadd("dead", {dead_job("w1"): 1})
    wsgi = create_wsgi_app(r)
    with httpx.Client(transport=httpx.WSGITransport(app=wsgi), base_url="http://x") as c:
        page = c.get("/dead")
        assert page.status_code == 200 and 'data-jid="w1"' in page.text
        assert c.get("/stats").json()["dead"] == 1


# --- the sets: paging and the bounded search ---------------------------------------------------

def test_search_reads_the_set_in_bounded_steps_and_finds_every_match(client, r, monkeypatch):
    monkeypatch.setattr(pages_jobs, "SCAN_BUDGET", 1000)
    members = {dead_job(f"j{i}", "Hit" if i % 500 == 0 else "Miss"): i for i in range(6000)}
    r.zadd("dead", members)
    seen, cursor, steps = set(), 0, 0
    while True:
        page = client.get("/dead", params={"class": "Hit", "cursor": cursor}).text
        seen |= set(re.findall(r'<tr data-jid="(j\d+)"', page))
        examined = int(re.search(r"([\d,]+) jobs examined", page).group(1).replace(",", ""))
        assert examined <= 1000 + 500  # the budget, overshot by at most one ZSCAN reply
        steps += 1
        found = re.search(r'href="/dead\?class=Hit&amp;cursor=(\d+)"', page)
        if not found:
            break
        cursor = int(found.group(1))
    assert seen == {f"j{i}" for i in range(0, 6000, 500)}
    assert steps >= 4


def test_a_page_of_dead_is_read_by_index_newest_first(client, r):
    r.zadd("dead", {dead_job(f"j{i}"): i for i in range(60)})
    page2 = client.get("/dead", params={"page": 2}).text
    assert re.findall(r'<tr data-jid="(j\d+)"', page2) == [f"j{i}" for i in range(34, 9, -1)]
    assert "page 2 of 3" in page2


# --- metrics: the reader on Sidekiq 7's layout ---------------------------------------------------

def test_the_keys_are_sidekiqs():
    t = 1739522580.0  # 2025-02-14 08:43:00 UTC
    assert m.minute_key(t) == "j|250214|8:43"
    assert m.rollup_key(t) == "j|250214|8:4"
    assert m.histogram_key("App::Job", t) == "h|App::Job-14-8:43"
    assert len(m.LABELS) == len(m.BUCKETS) + 1 == 26


def test_per_class_totals_and_the_histogram(r):
    now = time.time()
    for minutes_ago, (p, f, ms) in {0: (5, 1, 400), 10: (3, 0, 300), 90: (7, 2, 1000)}.items():
        key = m.minute_key(now - minutes_ago * 60)
        r.hincrby(key, "Billing|p", p)
        r.hincrby(key, "Billing|f", f)
        r.hincrby(key, "Billing|ms", ms)
    r.hincrby(m.minute_key(now), "Mail|p", 2)
    for minutes_ago, bucket, n in ((0, 3, 4), (10, 3, 2), (10, 7, 1), (90, 0, 5)):
        r.execute_command("BITFIELD", m.histogram_key("Billing", now - minutes_ago * 60),
                          "OVERFLOW", "SAT", "INCRBY", "u16", f"#{bucket}", n)
    reader = m.MetricsReader(r, __import__("queued.keys", fromlist=["Keys"]).Keys())
    hour = reader.top(1, now)
    assert [(c.klass, c.processed, c.failed, c.ms) for c in hour.classes] == [
        ("Billing", 8, 1, 700), ("Mail", 2, 0, 0)]
    assert hour.classes[0].mean_ms == 100.0
    two = reader.top(2, now)
    assert (two.classes[0].processed, two.classes[0].failed) == (15, 3)
    assert reader.histogram("Billing", 1, now)[:8] == [0, 0, 0, 6, 0, 0, 0, 1]
    assert sum(reader.histogram("Billing", 2, now)) == 12
    series = reader.series("Billing", 1, now)
    assert len(series) == 60 and series[-1][1].processed == 5
    # beyond 8 hours with no ten-minute rollups: the minute hashes, said so
    long = reader.top(24, now)
    assert long.minute_only and long.classes[0].processed == 15


def test_ten_minute_rollups_serve_the_long_periods(r):
    now = time.time()
    r.hincrby(m.rollup_key(now - 30 * 3600), "Old|p", 9)
    reader = m.MetricsReader(r, __import__("queued.keys", fromlist=["Keys"]).Keys())
    period = reader.top(72, now)
    assert (period.step, [(c.klass, c.processed) for c in period.classes]) == (600, [("Old", 9)])


def test_period_parameter():
    assert [m.parse_period(t) for t in ("1h", "72h", "100h", "0", "x", None, "8")] == [
        1, 72, 72, 1, 1, 1, 8]


def test_metrics_pages_show_the_seeded_numbers(client, r):
    now = time.time()
    r.hincrby(m.minute_key(now), "Billing|p", 4)
    r.hincrby(m.minute_key(now), "Billing|ms", 2000)
    r.execute_command("BITFIELD", m.histogram_key("Billing", now), "INCRBY", "u16", "#10", 4)
    page = client.get("/job-metrics", params={"period": "1h"}).text
    row = re.search(r'<tr data-class="Billing">(.*?)</tr>', page, re.S).group(1)
    assert '<td class="num processed">4</td>' in row and "500 ms" in row
    detail = client.get("/job-metrics/Billing").text
    assert 'data-bucket="1.1s" data-count="4"' in detail


# --- Prometheus ----------------------------------------------------------------------------------

def test_prometheus_gauges_parsed_with_the_client_library(client, r):
    now = time.time()
    r.set("stat:processed", 120)
    r.set("stat:failed", 7)
    r.sadd("queues", "default", "low")
    r.lpush("queue:default", json.dumps({"class": "X", "args": [], "jid": "q1",
                                         "enqueued_at": now - 30}))
    r.sadd("paused", "low")
    r.zadd("schedule", {dead_job("s"): 1})
    r.zadd("retry", {dead_job("r1"): 1, dead_job("r2"): 2})
    r.zadd("dead", {dead_job(f"d{i}"): i for i in range(3)})
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert samples[("queued_processed_jobs_total", ())] == 120
    assert samples[("queued_failed_jobs_total", ())] == 7
    assert samples[("queued_enqueued_jobs", ())] == 1
    assert samples[("queued_scheduled_jobs", ())] == 1
    assert samples[("queued_retry_jobs", ())] == 2
    assert samples[("queued_dead_jobs", ())] == 3
    assert samples[("queued_processes", ())] == 0
    assert samples[("queued_busy_workers", ())] == 0
    assert samples[("queued_queues", ())] == 2
    assert samples[("queued_queue_enqueued_jobs", (("queue", "default"),))] == 1
    assert samples[("queued_queue_enqueued_jobs", (("queue", "low"),))] == 0
    assert samples[("queued_queue_paused", (("queue", "low"),))] == 1
    assert 29 < samples[("queued_queue_latency_seconds", (("queue", "default"),))] < 60


# --- queuedctl web -------------------------------------------------------------------------------

def ctl(*args, timeout=20):
    return subprocess.run([sys.executable, "-m", "queued.admin.ctl", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"})


def test_queuedctl_web_errors(redis_url):
    bad = ctl("web", "--redis", redis_url, "--bind", "nowhere")
    assert bad.returncode == 2 and "--bind must be HOST:PORT" in bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = ctl("web", "--redis", redis_url, "--bind", f"127.0.0.1:{port}")
    assert busy.returncode == 2 and "cannot listen on" in busy.stderr
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_port = closed.getsockname()[1]
    down = ctl("web", "--redis", f"redis://127.0.0.1:{dead_port}/0", "--timeout", "1")
    assert down.returncode == 3 and "unreachable" in down.stderr


def test_the_busy_page_shows_what_a_process_holds_its_threads_and_hangs(client, r):
    # Given a threaded queued master holding 4 jobs, one of them past its limit and named
    # with a hostile class name
    identity = "web-1:4721:0f3a9c2b1d4e"
    r.sadd("processes", identity)
    r.hset(identity, mapping={
        "info": json.dumps({"hostname": "web-1", "pid": 4721, "concurrency": 50,
                            "processes": 2, "threads": 25, "queues": ["default"],
                            "groups": [{"name": "", "queues": ["default"], "processes": 2,
                                        "threads": 25}]}),
        "busy": "3", "beat": repr(time.time()), "quiet": "false", "rss": "1000",
        "reserved": "4", "hangs": json.dumps([{"worker": 0, "pid": 76, "thread": 5,
                                                "jid": "k" * 24, "class": "<b>x</b>",
                                                "over": 2.5}])})
    page = client.get("/busy").text
    # Then its row says 3 of 50 busy, as 2 x 25 threads, 4 reserved, and the hang (escaped)
    assert "3 / 50" in page and "2 × 25 threads" in page
    assert re.search(r'<td class="num">4</td>', page)
    assert "thread 5: &lt;b&gt;x&lt;/b&gt; jid=" + "k" * 24 + " is 2.5s past its timeout" in page
    assert "<b>x</b>" not in page
