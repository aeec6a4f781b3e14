"""The dashboard's HTTP side without a browser (Starlette's TestClient, a real redis-server):
CSRF on every POST, security headers, basic auth, mounting as ASGI and WSGI, the bounded
search, the per-class metrics reader on Sidekiq 7's layout, the Prometheus gauges parsed with
the client library's parser, and ``queuedctl web``'s errors."""
from __future__ import annotations

import base64
import html
import json
import re
import socket
import subprocess
import sys
import time
import tracemalloc
import zlib

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from harness import ROOT
from queued.admin import metrics as m
from queued.admin.ctltext import name as ctl_name
from queued.admin.entries import Entry
from queued.admin.web import create_app, create_wsgi_app
from queued.admin.web import flash, pages_jobs
from queued.admin.web.filters import marked
from queued.admin.web.security import CSP


def dead_job(jid, klass="X", args=(1,), error="Boom") -> bytes:
    return json.dumps({"class": klass, "args": list(args), "jid": jid, "queue": "default",
                       "error_class": error, "error_message": "m", "retry_count": 1}).encode()


@pytest.fixture
def client(r):
    with TestClient(create_app(r), base_url="http://localhost") as c:
        yield c


def flash_of(page: str) -> str | None:
    """The message the page shows at its top (an action's answer), or None."""
    found = re.search(r'<p class="flash" role="status">(.*?)</p>', page, re.S)
    return html.unescape(found.group(1)) if found else None


def token(client, path="/dead") -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).text).group(1)


# --- CSRF, GET, headers, auth -------------------------------------------------------------------

#: Every kind of POST, and what it changed once done: (dead, retry, default's jobs, the live
#: process's remote signals).
POSTS = [("/dead", {"action": "delete", "scope": "all"}, (0, 1, 1, [])),
         ("/retries", {"action": "delete", "scope": "all"}, (1, 0, 1, [])),
         ("/queues/default", {"action": "clear"}, (1, 1, 0, [])),
         ("/busy", {"action": "stop", "scope": "all", "identity": "web-host:4242:0a1b2c"},
          (1, 1, 1, [b"TERM"]))]
LIVE = "web-host:4242:0a1b2c"


def live_process(r, identity=LIVE, busy=0, concurrency=4):
    """A process record as a live daemon's heartbeat leaves it."""
    r.sadd("processes", identity)
    r.hset(identity, mapping={"info": json.dumps({"hostname": "web-host", "pid": 4242,
                                                  "concurrency": concurrency,
                                                  "queues": ["default"]}),
                              "busy": str(busy), "beat": str(time.time()), "quiet": "false"})


@pytest.mark.parametrize("path,form,effect", POSTS)
def test_every_post_without_a_valid_token_is_refused_and_changes_nothing(client, r, path, form,
                                                                         effect):
    # Given a job in dead, in retry and in default, and a live process a stop would signal
    r.zadd("dead", {dead_job("a"): 1})
    r.zadd("retry", {dead_job("b"): 1})
    r.lpush("queue:default", dead_job("c"))
    r.sadd("queues", "default")
    live_process(r)

    def state():
        return (r.zcard("dead"), r.zcard("retry"), r.llen("queue:default"),
                r.lrange(f"{LIVE}-signals", 0, -1))

    good = token(client)
    other = TestClient(client.app, base_url="http://localhost")  # another browser
    forged = token(other)
    # When it is posted with no token, a wrong one, or another browser's
    for data in (form, {**form, "csrf_token": "x"}, {**form, "csrf_token": forged}):
        assert client.post(path, data=data, follow_redirects=False).status_code == 403
    # Then nothing changed
    assert state() == (1, 1, 1, [])
    # and with this browser's own token it is done
    assert client.post(path, data={**form, "csrf_token": good},
                       follow_redirects=False).status_code == 303
    assert state() == effect


def test_an_action_on_a_key_of_another_type_says_so_and_changes_nothing(client, r):
    r.set("retry", "not a zset")
    done = client.post("/retries", data={"csrf_token": token(client), "action": "delete",
                                         "scope": "all"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/retries"
    assert r.get("retry") == b"not a zset"
    # and the page it goes back to says what was refused, and what is wrong with the page
    page = client.get("/retries", headers={"accept": "text/html"})
    assert flash_of(page.text) == \
        "Redis refused: WRONGTYPE retry holds a string, not a zset: left as it is"
    assert page.status_code == 500 and "Redis refused: WRONGTYPE" in \
        re.search(r'<p class="error">(.*?)</p>', page.text).group(1)


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
    c = TestClient(create_app(r, auth="admin:s3cret"), base_url="http://localhost")
    assert c.get("/").status_code == 401
    assert c.get("/", auth=("admin", "wrong")).status_code == 401
    assert c.get("/", auth=("admin", "s3cret")).status_code == 200


def test_mounted_in_a_starlette_site_its_links_carry_the_prefix(r):
    site = Starlette(routes=[Mount("/ops/queued", app=create_app(r))])
    c = TestClient(site, base_url="http://localhost")
    page = c.get("/ops/queued/queues")
    assert page.status_code == 200
    assert 'href="/ops/queued/static/app.css"' in page.text
    assert 'href="/ops/queued/dead"' in page.text
    assert c.get("/ops/queued/static/app.js").status_code == 200


def test_the_wsgi_app_serves_the_same_pages(r):
    r.zadd("dead", {dead_job("w1"): 1})
    wsgi = create_wsgi_app(r)
    with httpx.Client(transport=httpx.WSGITransport(app=wsgi),
                      base_url="http://localhost") as c:
        page = c.get("/dead")
        assert page.status_code == 200 and 'data-jid="w1"' in page.text
        assert c.get("/stats").json()["dead"] == 1


# --- Host: only the names the dashboard is served under (DNS rebinding) ----------------------

def test_a_dns_rebinding_page_gets_no_token_and_acts_on_nothing(served, r):
    # Given the operator's own browser on the dashboard, and a job waiting in default
    r.sadd("queues", "default")
    r.lpush("queue:default", dead_job("waiting"))
    port = httpx.URL(served).port
    with httpx.Client(base_url=served, timeout=20) as own:
        page = own.get("/queues/default")
        assert page.status_code == 200
        good = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        # When a page of attacker.example, whose name now resolves to 127.0.0.1, reads the
        # dashboard and posts to it (the browser sends its own Host, and this cookie)
        attacker = {"host": f"attacker.example:{port}"}
        for path in ("/", "/queues", "/queues/default", "/dead", "/stats", "/metrics"):
            read = own.get(path, headers=attacker)
            # Then it is refused before any page, token or cookie is served
            assert read.status_code == 400, path
            assert "set-cookie" not in read.headers and "csrf_token" not in read.text
            assert read.text == f"queued: this dashboard does not answer to host " \
                                f"attacker.example:{port} (queuedctl web --allow-host)\n"
        posted = own.post("/queues/default", headers=attacker,
                          data={"csrf_token": good, "action": "clear"})
        assert posted.status_code == 400
        assert r.llen("queue:default") == 1
        # And the names of the bound loopback address, on its port, are answered
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}",
                     f"LocalHost.:{port}"):
            assert own.get("/stats", headers={"host": host}).status_code == 200, host
        for host in ("127.0.0.1", f"127.0.0.1:{port + 1}", f"localhost.attacker.example:{port}",
                     f"attacker.example:{port}@127.0.0.1", "", f"[::1]x:{port}"):
            assert own.get("/stats", headers={"host": host}).status_code == 400, host


def test_allow_host_adds_the_names_an_operator_serves_it_under(redis_server, tmp_path):
    from webserve import serve
    with serve(redis_server.url, str(tmp_path / "web.log"), "--allow-host", "ops.example.com",
               "--allow-host", "db.example.com:8443") as base:
        for host, status in (("ops.example.com", 200), ("ops.example.com:9000", 200),
                             ("OPS.example.com", 200), ("db.example.com:8443", 200),
                             ("db.example.com", 400), ("db.example.com:8444", 400),
                             ("evil.example.com", 400)):
            got = httpx.get(base + "/stats", headers={"host": host}, timeout=20)
            assert got.status_code == status, host


def test_the_mountable_app_checks_host_too(r):
    # By default: the loopback names, on any port
    default = create_app(r)
    assert TestClient(default, base_url="http://localhost:8000").get("/").status_code == 200
    assert TestClient(default, base_url="http://127.0.0.1").get("/").status_code == 200
    assert TestClient(default, base_url="http://attacker.example").get("/").status_code == 400
    # Given the names of the site it is mounted in
    site = Starlette(routes=[Mount("/ops/queued", app=create_app(
        r, allowed_hosts=["intranet.example"]))])
    assert TestClient(site, base_url="http://intranet.example").get(
        "/ops/queued/queues").status_code == 200
    assert TestClient(site, base_url="http://localhost").get(
        "/ops/queued/queues").status_code == 400
    # "*": the site in front checks Host itself (Django's ALLOWED_HOSTS)
    assert TestClient(create_app(r, allowed_hosts=["*"]),
                      base_url="http://any.example").get("/").status_code == 200
    wsgi = create_wsgi_app(r, allowed_hosts=["intranet.example"])
    for host, status in (("intranet.example", 200), ("attacker.example", 400)):
        with httpx.Client(transport=httpx.WSGITransport(app=wsgi),
                          base_url=f"http://{host}") as c:
            assert c.get("/stats").status_code == status


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


# --- a job's backtrace: hostile data is shown as unreadable, bounded, never a 500 ----------------

def blob(raw: bytes) -> str:
    """error_backtrace as Sidekiq writes it: base64 of zlib."""
    return base64.b64encode(zlib.compress(raw, 9)).decode()


UNREADABLE = "(the backtrace could not be read)"
TOO_LARGE = "(the backtrace is larger than 1 MiB: not shown)"
#: Each hostile backtrace and the one line its page says instead.
HOSTILE = {
    "not base64": "!!!% not base64 at all %%%",
    "base64, not zlib": base64.b64encode(b"plain bytes, never compressed").decode(),
    "zlib, not JSON": blob(b"\x00\xff not json"),
    "zlib, not UTF-8": blob(b'["\xff\xfe"]'),
    "a JSON object": blob(b'{"a": 1}'),
    "a cut stream": base64.b64encode(zlib.compress(b'["a", "b"]' * 100)[:-10]).decode(),
    "nested deeper than Python recurses": blob(b"[" * 200_000 + b"]" * 200_000),
    "a bomb: 64 MiB of one line": blob(b'["' + b"A" * (64 << 20) + b'"]'),
}


@pytest.mark.parametrize("what", list(HOSTILE))
def test_a_hostile_backtrace_is_never_a_500(client, r, what):
    # Given a dead job whose error_backtrace is hostile
    msg = {"class": "X", "args": [], "jid": "bt", "queue": "default", "error_class": "E",
           "error_message": "m", "error_backtrace": HOSTILE[what]}
    r.zadd("dead", {json.dumps(msg): 1000.0})
    # When its page is opened, Then it is shown, the backtrace said to be unreadable (or too
    # large: the bomb) in exactly one line
    page = client.get("/dead/1000.0/bt")
    assert page.status_code == 200
    backtrace = re.search(r'<pre class="backtrace">(.*?)</pre>', page.text, re.S)
    assert backtrace is not None
    said = TOO_LARGE if what.startswith("a bomb") else UNREADABLE
    assert html.unescape(backtrace.group(1)).strip() == said


def test_a_backtrace_bomb_is_read_in_bounded_memory():
    # Given a backtrace that inflates to 256 MiB from a few hundred KiB
    bomb = blob(b'["' + b"A" * (256 << 20) + b'"]')
    assert len(bomb) < 1 << 20
    entry = Entry(json.dumps({"jid": "b", "error_backtrace": bomb}).encode(), 1.0, "dead")
    # When it is decoded, Then no more than about the 1 MiB bound is ever held
    tracemalloc.start()
    try:
        lines = entry.backtrace
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == ["(the backtrace is larger than 1 MiB: not shown)"]
    assert peak < 8 << 20
    # and a good one of Sidekiq's is read whole
    good = Entry(json.dumps({"jid": "g", "error_backtrace": blob(
        json.dumps(["app.rb:1:in `x'", "app.rb:2"]).encode())}).encode(), 1.0, "dead")
    assert good.backtrace == ["app.rb:1:in `x'", "app.rb:2"]


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
    live_process(r, "h:1:a", busy=2)
    live_process(r, "h:2:b", busy=1)
    r.sadd("processes", "h:3:gone")  # its record expired: Sidekiq's Stats counts it too
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
    assert samples[("queued_processes", ())] == 3
    assert samples[("queued_busy_workers", ())] == 3
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


# --- every name Redis can hold addresses exactly its queue, job or class -----------------------
# Over the real `queuedctl web` (uvicorn decodes a path once, as in production; Starlette's
# TestClient decodes it twice and would mangle a name holding %41).

#: Queue names and jids with every character that means something in a URL, and the empty one.
ODD_NAMES = ["critical?old", "critical", "critical#frag", "a%41b", "mailers/high", "with space",
             "ünï/cødé ✓", "", "../dead", ".", "..", "x" * 2000 + "?end", "q&r=s",
             'quo"te<b>', "tab\tand\nnewline"]


@pytest.fixture(scope="module")
def served(redis_server, tmp_path_factory):
    from webserve import serve
    log = tmp_path_factory.mktemp("web") / "web.log"
    with serve(redis_server.url, str(log)) as base:
        yield base


@pytest.fixture
def browser_like(served, r):
    """An HTTP client with a cookie jar on the served dashboard (``r`` flushed Redis first)."""
    with httpx.Client(base_url=served, timeout=20, follow_redirects=True) as c:
        yield c


def rows_by(page: str, attribute: str) -> dict[str, str]:
    """{the unescaped value of ``attribute`` on a table row: that row's HTML}."""
    return {html.unescape(value): row for value, row in
            re.findall(rf'<tr {attribute}="([^"]*)">(.*?)</tr>', page, re.S)}


def attr(fragment: str, name: str) -> str:
    return html.unescape(re.search(rf'{name}="([^"]*)"', fragment).group(1))


def heading(page: str) -> str:
    return html.unescape(re.search(r"<h1>(.*?)</h1>", page, re.S).group(1))


def code(name: str) -> str:
    """A name in a heading, as the page marks it (quoted, its controls escaped: filters.py)."""
    return f"<code>{html.unescape(str(marked(name)))}</code>"


def test_every_queue_row_links_and_acts_on_exactly_its_queue(browser_like, r):
    # Given a queue of each odd name, each with one job
    for i, name in enumerate(ODD_NAMES):
        r.sadd("queues", name)
        r.lpush(f"queue:{name}", json.dumps({"class": "X", "args": [i], "jid": f"j{i}"}))
    page = browser_like.get("/queues")
    # Then the list page shows every one of them
    assert page.status_code == 200
    rows = rows_by(page.text, "data-queue")
    assert sorted(rows) == sorted(ODD_NAMES)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    for i, name in enumerate(ODD_NAMES):
        # and its row's link opens that queue's page, with that queue's job
        shown = browser_like.get(attr(rows[name], "href"))
        assert shown.status_code == 200, name
        assert code(name) in heading(shown.text)
        assert f"<code>j{i}</code>" in shown.text
    for i, name in enumerate(ODD_NAMES):
        # When its row's Clear is pressed
        before = {n: r.llen(f"queue:{n}") for n in ODD_NAMES}
        done = browser_like.post(attr(rows[name], "action"),
                                 data={"csrf_token": token, "action": "clear"})
        # Then exactly that queue was cleared, and the browser went back to the list
        assert done.status_code == 200 and str(done.url.path) == "/queues", name
        after = {n: r.llen(f"queue:{n}") for n in ODD_NAMES}
        assert after == {**before, name: 0}, name
        said, expected = flash_of(done.text), f"cleared {ctl_name(name)}: 1 job deleted"
        if len(expected) <= flash.MAX_TEXT:
            assert said == expected
        else:  # (a 2,000-character name: its middle is left out of the message)
            assert len(said) == flash.MAX_TEXT and "…" in said
            assert said.startswith(expected[:400]) and said.endswith(expected[-400:])


def test_pause_from_a_queues_own_page_pauses_exactly_that_queue(browser_like, r):
    for name in ODD_NAMES:
        r.sadd("queues", name)
        r.lpush(f"queue:{name}", json.dumps({"class": "X", "args": [], "jid": "j"}))
    rows = rows_by(browser_like.get("/queues").text, "data-queue")
    for name in ODD_NAMES:
        own = browser_like.get(attr(rows[name], "href")).text
        form = re.search(r'<form method="post" action="([^"]*)"', own).group(1)
        token = re.search(r'name="csrf_token" value="([^"]+)"', own).group(1)
        done = browser_like.post(html.unescape(form), data={"csrf_token": token,
                                                            "action": "pause"})
        assert done.status_code == 200 and code(name) in heading(done.text), name
    assert {n.decode() for n in r.smembers("paused")} == set(ODD_NAMES)


def test_every_job_row_links_and_acts_on_exactly_its_job(browser_like, r):
    # Given dead, retry and scheduled jobs whose jids (and queues) are the odd names
    for key, slug in (("dead", "dead"), ("retry", "retries"), ("schedule", "scheduled")):
        r.zadd(key, {json.dumps({"class": "X", "args": [i], "jid": name, "queue": name,
                                 "error_class": "E", "error_message": "m"}): 1000.0 + i
                     for i, name in enumerate(ODD_NAMES)})
        page = browser_like.get(f"/{slug}")
        # Then the list page shows each
        assert page.status_code == 200
        rows = rows_by(page.text, "data-jid")
        assert sorted(rows) == sorted(ODD_NAMES)
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        for name in ODD_NAMES:
            # and its link opens that job
            detail = browser_like.get(attr(rows[name], "href"))
            assert detail.status_code == 200, (slug, name)
            assert code(name) in heading(detail.text)
        for k, name in enumerate(ODD_NAMES):
            # When its row is ticked and deleted, exactly that job goes
            box = re.search(r'<input type="checkbox" name="job" value="([^"]*)"', rows[name])
            done = browser_like.post(f"/{slug}", data={
                "csrf_token": token, "scope": "selected", "action": "delete",
                "job": html.unescape(box.group(1))})
            assert done.status_code == 200 and "deleted 1 job" in done.text, (slug, name)
            left = [json.loads(m)["jid"] for m in r.zrange(key, 0, -1)]
            assert sorted(left) == sorted(ODD_NAMES[k + 1:]), (slug, name)


def test_busy_and_metrics_pages_link_odd_queue_and_class_names(browser_like, r):
    # Given a live process running a job from queue mailers/high, and metrics of a class
    # whose name holds ? and /
    identity = "h:1:abc"
    r.sadd("processes", identity)
    r.hset(identity, mapping={"info": json.dumps({"hostname": "h", "pid": 1, "concurrency": 1,
                                                  "queues": ["mailers/high"]}),
                              "busy": "1", "beat": str(time.time()), "quiet": "false"})
    r.hset(f"{identity}:workers", "t1", json.dumps({
        "queue": "mailers/high", "run_at": time.time(),
        "payload": {"class": "Mail", "args": [], "jid": "m1", "queue": "mailers/high"}}))
    klass = "Odd/Class?v=1#x"
    r.hincrby(m.minute_key(time.time()), f"{klass}|p", 3)
    busy = browser_like.get("/busy")
    assert busy.status_code == 200
    link = re.search(r'<td class="queue"><a href="([^"]*)">mailers/high</a></td>',
                     busy.text).group(1)
    assert "<code>mailers/high</code>" in heading(browser_like.get(html.unescape(link)).text)
    metrics = browser_like.get("/job-metrics")
    row = rows_by(metrics.text, "data-class")[klass]
    detail = browser_like.get(attr(row, "href"))
    assert detail.status_code == 200 and klass in heading(detail.text)


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
    row = rows_by(page, "data-identity")[identity]
    rss, busy, reserved = re.findall(r'<td class="num">(.*?)</td>', row, re.S)
    assert (busy, reserved) == ("3 / 50<br><small>2 × 25 threads</small>", "4")
    assert "thread 5: &lt;b&gt;x&lt;/b&gt; jid=" + "k" * 24 + " is 2.5s past its timeout" in row
    assert "<b>x</b>" not in page
