"""The dashboard at 3 a.m. (issue 20), over HTTP on a real redis-server: the stats bar and the
footer on every page, messages only from the server, the Cron page, a queue's per-job actions,
search counts, page sizes, sub-millisecond times, chart axes, times with their UTC stamp, and
names Redis holds that are not UTF-8. In Chromium: test_web_browser.py."""
from __future__ import annotations

import html
import json
import re
import time

import httpx
import itsdangerous
import pytest
import redis as redis_lib
from starlette.testclient import TestClient

from queued import __version__
from queued.admin import metrics as m
from queued.admin.web import charts, create_app, filters, flash
from queued.admin.web.frame import redis_location
from queued.connection import client_from_url

from test_web import attr, dead_job, flash_of, heading, live_process, rows_by
from webserve import serve


@pytest.fixture(scope="module")
def served(redis_server, tmp_path_factory):
    """The real ``queuedctl web`` (uvicorn: one decoding of a path, as in production)."""
    with serve(redis_server.url, str(tmp_path_factory.mktemp("web") / "web.log")) as base:
        yield base


@pytest.fixture
def client(r):
    with TestClient(create_app(r, secret_key="s3cret"), base_url="http://localhost") as c:
        # (as app.js does: a count kept for a question sends the page's token)
        c.headers["x-csrf-token"] = token_of(c.get("/dead").text)
        yield c


def token_of(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def bar_of(page: str) -> dict[str, tuple[int, str]]:
    """{figure: (its number, where it links)} of the page's stats bar."""
    bar = re.search(r'<nav class="statsbar"[^>]*>(.*?)</nav>', page, re.S).group(1)
    return {key: (int(value.replace(",", "")), html.unescape(href)) for href, key, value in
            re.findall(r'<a href="([^"]*)" class="stat stat-(\w+)[^"]*"><span class="value" '
                       r'id="stat-\w+">([\d,]+)</span>', bar)}


def footer_of(page: str) -> dict[str, str]:
    foot = re.search(r'<footer id="footer">(.*?)</footer>', page, re.S).group(1)
    return {"redis": html.unescape(re.search(r'<code class="redis">(.*?)</code>', foot).group(1)),
            "namespace": html.unescape(
                re.search(r'<code class="namespace">(.*?)</code>', foot).group(1)),
            "version": re.search(r'<span class="version">(.*?)</span>', foot).group(1)}


# --- 1. the stats bar and the footer, on every page ------------------------------------------

PAGES = ["/", "/busy", "/queues", "/queues/default", "/scheduled", "/retries", "/dead",
         "/dead?class=X", "/tasks", "/cron", "/job-metrics", "/job-metrics/X"]


def test_every_page_has_the_stats_bar_each_figure_a_link_and_the_footer(client, r, redis_url):
    # Given 1,234,567 processed, 7 failed, 3 + 2 jobs waiting, 1 scheduled, 2 retries,
    # 3 dead and two live processes running 3 jobs
    r.set("stat:processed", 1234567)
    r.set("stat:failed", 7)
    r.sadd("queues", "default", "low")
    r.lpush("queue:default", *(dead_job(f"q{i}") for i in range(3)))
    r.lpush("queue:low", *(dead_job(f"l{i}") for i in range(2)))
    r.zadd("schedule", {dead_job("s"): 1})
    r.zadd("retry", {dead_job("r1"): 1, dead_job("r2"): 2})
    r.zadd("dead", {dead_job(f"d{i}"): i for i in range(3)})
    live_process(r, "h:1:a", busy=2)
    live_process(r, "h:2:b", busy=1)
    expected = {"processed": (1234567, "/#history"), "failed": (7, "/job-metrics"),
                "busy": (3, "/busy#running"), "enqueued": (5, "/queues"),
                "scheduled": (1, "/scheduled"), "retries": (2, "/retries"),
                "dead": (3, "/dead"), "processes": (2, "/busy#processes")}
    # When each page is opened (and a page that does not exist)
    for path in [*PAGES, "/tasks/no-such-task"]:
        page = client.get(path, headers={"accept": "text/html"})
        assert page.status_code == (404 if "no-such" in path else 200), path
        # Then its stats bar has every figure, each linking to the page that explains it
        assert bar_of(page.text) == expected, path
        # and its footer says which Redis (no password), which namespace, which queued
        assert footer_of(page.text) == {"redis": redis_url, "namespace": "(none)",
                                        "version": __version__}, path
    # and each link opens
    for _n, href in expected.values():
        assert client.get(href.partition("#")[0]).status_code == 200, href


def test_the_footer_says_the_namespace_and_no_password(r, redis_url):
    c = TestClient(create_app(r, namespace="billing"), base_url="http://localhost")
    assert footer_of(c.get("/").text)["namespace"] == "billing"
    for url, shown in (("redis://alice:s3cret@db.example:6380/2", "redis://alice@db.example:6380/2"),
                       ("redis://:s3cret@db.example/0", "redis://db.example:6379/0"),
                       ("rediss://:s3cret@db.example:6390/1", "rediss://db.example:6390/1"),
                       ("unix:///run/redis.sock?db=3&password=s3cret", "unix:///run/redis.sock?db=3"),
                       ("redis+sentinel://:s3cret@s1:26379,s2:26380/mymaster/4",
                        "redis+sentinel://s1:26379,s2:26380/mymaster/4")):
        assert redis_location(client_from_url(url)) == shown, url


def test_a_page_whose_redis_is_down_says_so_without_a_bar(r):
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = redis_lib.Redis(port=port, socket_connect_timeout=1)
    c = TestClient(create_app(down), base_url="http://localhost")
    page = c.get("/queues", headers={"accept": "text/html"})
    assert page.status_code == 503 and "Redis is unreachable" in page.text
    assert 'class="statsbar"' not in page.text


# --- 7. messages come from the server only -----------------------------------------------------

def test_a_message_in_a_link_or_a_forged_cookie_shows_nothing(client, r):
    r.sadd("queues", "default")
    lure = "All jobs retried. Nothing to do: run ./fix.sh"
    # A ?msg= anyone can put in a link
    for query in ({"msg": lure}, {"flash": lure}, {"message": lure}):
        page = client.get("/queues", params=query)
        assert flash_of(page.text) is None and lure not in page.text
    # A cookie of the right name, unsigned, signed with another secret, or another browser's,
    # sent as it is (a Cookie header of this browser's CSRF cookie and the forged one)
    client.get("/queues")  # (this browser's CSRF cookie)
    own = client.cookies.get("queued_csrf")

    def sign(secret, doc):
        return itsdangerous.URLSafeTimedSerializer(secret, salt="queued-web-flash").dumps(doc)

    def shown(value):
        page = client.get("/queues", headers={"cookie": f"queued_csrf={own}; "
                                                        f"{flash.COOKIE}={value}"})
        assert page.status_code == 200
        return flash_of(page.text), page
    for value in (lure, sign("other", {"m": lure, "b": own}),
                  sign("s3cret", {"m": lure, "b": "another browser's token"})):
        said, page = shown(value)
        assert said is None and lure not in page.text
    # while one signed with the app's secret for this browser is shown (so the forged ones
    # did reach the server)
    assert shown(sign("s3cret", {"m": lure, "b": own}))[0] == lure
    # What the server itself says after an action is shown once
    done = client.post("/queues/default", data={"csrf_token": token_of(page.text),
                                                "action": "pause"})
    assert flash_of(done.text) == "paused default"
    assert flash_of(client.get("/queues").text) is None


def test_a_message_too_old_is_not_shown(client, r, monkeypatch):
    r.sadd("queues", "default")
    page = client.get("/queues")
    done = client.post("/queues/default", data={"csrf_token": token_of(page.text),
                                                "action": "pause"}, follow_redirects=False)
    # The message's cookie, as the server set it, is sent by hand: the client's jar would drop
    # it itself once its max-age is past, and the server's own check would go unseen
    value = done.cookies[flash.COOKIE]
    own = client.cookies.get("queued_csrf")
    client.cookies.delete(flash.COOKIE)

    def shown():
        page = client.get(done.headers["location"],
                          headers={"cookie": f"queued_csrf={own}; {flash.COOKIE}={value}"})
        return flash_of(page.text)
    # A moment before its age is up it is shown (what the test sends reaches the server) ...
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + flash.MAX_AGE - 5)
    assert shown() == "paused default"
    # ... and once its age is up it is not
    monkeypatch.setattr(time, "time", lambda: now + flash.MAX_AGE + 5)
    assert shown() is None


# --- 2. Cron ---------------------------------------------------------------------------------

CRON = {"schedule": {
    "berlin_morning": {"cron": "0 9 * * * Europe/Berlin", "class": "Tick",
                       "description": "reports at nine, Berlin time"},
    "every_minute": {"cron": "0 * * * * *", "class": "Tick", "queue": "ticks"},
    "often": {"every": "30s", "class": "Tick", "enabled": False}}}


def cron_rows(page: str) -> dict[str, dict[str, str]]:
    out = {}
    for name, row in rows_by(page, "data-name").items():
        cells = {cls: re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text))).strip()
                 for cls, text in re.findall(r'<td class="(\w+)">(.*?)</td>', row, re.S)}
        out[name] = cells
    return out


def test_the_cron_page_lists_what_queuedctl_cron_lists_and_acts_the_same(daemon, r, redis_url):
    from ctlrun import ctl_json
    # Given a master with three schedules: a zone, seconds, and one disabled in the file
    daemon(require=("cronjobs.py",), concurrency=1, scheduler=CRON)
    app = TestClient(create_app(redis_lib.Redis.from_url(redis_url)), base_url="http://localhost")
    listed = {row["name"]: row for row in ctl_json("cron", url=redis_url)}
    assert set(listed) >= {"berlin_morning", "every_minute", "often"}
    page = app.get("/cron").text
    rows = cron_rows(page)
    # Then the page lists each one, with what queuedctl cron says
    assert set(rows) == set(listed)
    for name, row in listed.items():
        cells = rows[name]
        assert cells["klass"] == row["class"] and cells["zone"] == row["zone"], name
        assert cells["state"] == row["status"], name
        assert (cells["next"] == "-") == (row["next_run"] is None), name
    # (a daily tick is the same a moment later; an every-second one is not)
    assert rows["berlin_morning"]["next"].startswith(
        filters.utc_text(listed["berlin_morning"]["next_run"]))
    assert rows["berlin_morning"]["schedule"] == "0 9 * * * Europe/Berlin"
    assert rows["berlin_morning"]["zone"] == "Europe/Berlin"
    assert rows["every_minute"]["zone"] == "UTC"
    assert rows["often"]["schedule"] == "every 30s"
    assert rows["often"]["state"] == "disabled" and rows["often"]["next"] == "-"
    # When every_minute is disabled on the page
    token = token_of(page)
    done = app.post("/cron", data={"csrf_token": token, "name": "every_minute",
                                   "action": "disable"})
    # Then queuedctl sees it disabled, and the page says so
    assert flash_of(done.text) == ("periodic job every_minute disabled: no master pushes it "
                                   "at its ticks until it is enabled again")
    assert {r["name"]: r["status"] for r in ctl_json("cron", url=redis_url)}[
        "every_minute"] == "disabled"
    assert cron_rows(done.text)["every_minute"]["state"] == "disabled"
    # When Enqueue now is pressed for it, one job is pushed to its queue (whatever its status)
    before = r.llen("queue:ticks")
    done = app.post("/cron", data={"csrf_token": token, "name": "every_minute",
                                   "action": "enqueue"})
    assert r.llen("queue:ticks") == before + 1
    pushed = json.loads(r.lindex("queue:ticks", 0))
    assert flash_of(done.text) == (f"pushed Tick jid={pushed['jid']} to queue ticks "
                                   f"(periodic job every_minute)")
    # and enabled again, it is
    app.post("/cron", data={"csrf_token": token, "name": "every_minute", "action": "enable"})
    assert r.hget("cron_job:every_minute", "status") == b"enabled"
    # An unknown one is said so
    done = app.post("/cron", data={"csrf_token": token, "name": "nope", "action": "enqueue"})
    assert flash_of(done.text) == "no periodic job named 'nope' (queuedctl cron lists them)"


# --- 3. a queue's jobs, one at a time -----------------------------------------------------------

def queue_rows(page: str) -> list[str]:
    return [html.unescape(j) for j in re.findall(r'<tr data-jid="([^"]*)">', page)]


def test_a_queue_page_deletes_and_moves_exactly_the_jobs_asked(client, r):
    # Given default with 60 jobs (q0 next to run), two of them with the very same jid
    r.sadd("queues", "default")
    jobs = [dead_job(f"q{i}", args=[i]) for i in range(60)] + [dead_job("twin", args=["a"]),
                                                               dead_job("twin", args=["b"])]
    r.lpush("queue:default", *jobs)
    page = client.get("/queues/default", params={"page": 2, "size": 25}).text
    assert queue_rows(page) == [f"q{i}" for i in range(25, 50)]
    boxes = dict(re.findall(r'<input type="checkbox" name="job" value="([^"]*)" '
                            r'aria-label="select ([^"]*)"', page))
    by_jid = {jid: value for value, jid in boxes.items()}
    # When two ticked rows are deleted
    done = client.post("/queues/default", data={
        "csrf_token": token_of(page), "action": "delete", "back_page": "2",
        "job": [by_jid["q30"], by_jid["q41"]]})
    # Then exactly those two are gone, and the browser is back on page 2
    assert flash_of(done.text) == "deleted 2 jobs"
    assert done.url.params["page"] == "2"
    left = [json.loads(j)["jid"] for j in reversed(r.lrange("queue:default", 0, -1))]
    assert "q30" not in left and "q41" not in left and len(left) == 60
    # When a row's own Run next is pressed, after workers took 10 jobs ahead of it
    row = re.search(r'<button type="submit" name="one" value="(run_next\|[^"]*)"',
                    rows_by(page, "data-jid")["q45"]).group(1)
    for _ in range(10):
        r.rpop("queue:default")
    done = client.post("/queues/default", data={"csrf_token": token_of(page), "one": row})
    # Then it is the next to run, nothing else moved
    assert flash_of(done.text) == "moved 1 job to the front"
    left2 = [json.loads(j)["jid"] for j in reversed(r.lrange("queue:default", 0, -1))]
    assert left2 == ["q45"] + [j for j in left[10:] if j != "q45"]
    # Of two jobs with the same jid, the one whose row was ticked is deleted
    page = client.get("/queues/default", params={"page": 2}).text
    twin_b = [v for v in re.findall(r'name="job" value="([^"]*)"', page)
              if v.split("|")[1] == filters.member_id(jobs[-1])]
    client.post("/queues/default", data={"csrf_token": token_of(page), "action": "delete",
                                         "job": twin_b})
    twins = [json.loads(j)["args"] for j in r.lrange("queue:default", 0, -1)
             if json.loads(j)["jid"] == "twin"]
    assert twins == [["a"]]
    # A job a worker took meanwhile is not found, and said so
    row = re.search(r'name="job" value="([^"]*)"', client.get("/queues/default").text).group(1)
    r.rpop("queue:default")
    done = client.post("/queues/default", data={"csrf_token": token_of(page),
                                                "action": "delete", "job": [row]})
    assert flash_of(done.text) == "deleted 0 jobs; 1 no longer there"


def test_jids_link_to_their_job_on_every_set(client, r):
    r.zadd("dead", {dead_job("d1"): 5.0})
    page = client.get("/dead").text
    link = re.search(r'<td class="jid"><a class="jid" href="([^"]*)"><code>d1</code>',
                     page).group(1)
    assert "<code>d1</code>" in heading(client.get(html.unescape(link)).text)


# --- 4. search counts, numbered confirmations, page sizes -------------------------------------

def test_a_search_counts_every_match_of_a_large_set(client, r):
    # Given 100,000 dead jobs, 1 in 40 a Billing timeout
    members = {}
    for i in range(100_000):
        hit = i % 40 == 0
        members[dead_job(f"j{i}", "Billing" if hit else "Mail",
                         error="Net::Timeout" if hit else "Boom")] = i
    r.zadd("dead", members)
    page = client.get("/dead", params={"class": "Billing", "error": "timeout"}).text
    url = attr(re.search(r'<span id="match-count"[^>]*>', page).group(0), "data-count")
    # Then the count the page asks for is every match, in the whole set
    assert client.get(url).json() == {"count": 2_500, "size": 100_000}
    # and every bulk button asks with that number, at the moment of the click
    buttons = re.findall(r'<button type="submit" name="action" value="(\w+)" class="[^"]*" '
                         r'data-confirm="([^"]*)" data-count="([^"]*)">', page)
    assert [(a, html.unescape(q)) for a, q, _ in buttons] == [
        ("retry", "Retry {n} jobs that match this search now?"),
        ("delete", "Delete {n} jobs that match this search?")]
    # (on a copy kept for the answer: hold=1, whose token the form sends back)
    assert {html.unescape(c) for _, _, c in buttons} == {html.unescape(url) + "&hold=1"}
    held = client.get(html.unescape(buttons[0][2])).json()
    assert (held["count"], held["size"], len(held["token"])) == (2_500, 100_000, 24)
    # and with no search, the whole set
    assert client.get("/dead/count").json() == {"count": 100_000, "size": 100_000}


def test_page_sizes_25_by_default_and_as_chosen(client, r):
    r.zadd("dead", {dead_job(f"j{i}"): i for i in range(600)})
    r.sadd("queues", *(f"q{i:03}" for i in range(120)))
    for size, rows in ((None, 25), ("50", 50), ("100", 100), ("500", 500), ("7", 25),
                       ("x", 25)):
        page = client.get("/dead", params={"size": size} if size else {}).text
        assert len(re.findall(r"<tr data-jid=", page)) == rows, size
        queues = client.get("/queues", params={"size": size} if size else {}).text
        assert len(re.findall(r"<tr data-queue=", queues)) == min(rows, 120), size
    # the next page keeps the size
    page = client.get("/dead", params={"size": 100}).text
    assert html.unescape(re.search(r'<a rel="next" href="([^"]*)"', page).group(1)) == \
        "/dead?size=100&page=2"
    assert "1-100 of 600" in page


# --- 6. times shown as such ---------------------------------------------------------------------

def test_durations_below_a_millisecond_are_not_zero():
    assert [filters.duration(s) for s in (0, 0.00042, 0.0042, 0.042, 0.42, 4.2, 420)] == [
        "0 ms", "0.42 ms", "4.2 ms", "42 ms", "420 ms", "4.2 s", "7m 0s"]


def test_metrics_show_a_fast_class_in_fractions_of_a_millisecond(client, r):
    # Given a class that ran 12 times in 5 ms in all
    now = time.time()
    r.hincrby(m.minute_key(now), "Fast|p", 12)
    r.hincrby(m.minute_key(now), "Fast|ms", 5)
    row = rows_by(client.get("/job-metrics").text, "data-class")["Fast"]
    assert re.search(r'<td class="num mean">(.*?)</td>', row).group(1) == "0.42 ms"
    assert re.search(r'<td class="mean">(.*?)</td>', client.get("/job-metrics/Fast").text
                     ).group(1) == "0.42 ms"


def test_chart_axes_have_round_ticks_and_times():
    assert charts.nice_ticks(3) == [0, 1, 2, 3]
    assert charts.nice_ticks(58.7) == [0, 20, 40, 60]
    assert charts.nice_ticks(1234) == [0, 500, 1000, 1500]
    assert charts.nice_ticks(0.3) == [0, 0.1, 0.2, 0.30000000000000004]


def test_the_class_page_draws_axes_with_labels(client, r):
    now = time.time()
    start = now - now % 60
    for k in range(60):
        r.hincrby(m.minute_key(start - k * 60), "Billing|p", 7 if k == 3 else 1)
    r.hincrby(m.minute_key(now), "Billing|f", 1)
    r.execute_command("BITFIELD", m.histogram_key("Billing", now), "INCRBY", "u16", "#10", 4)
    page = client.get("/job-metrics/Billing").text
    chart = re.search(r'<svg id="processed-chart".*?</svg>', page, re.S).group(0)
    y = re.search(r'<g class="axis y-axis">(.*?)</g>', chart, re.S).group(1)
    assert re.findall(r'text-anchor="end">([\d,]+)</text>', y) == ["0", "2", "4", "6", "8"]
    x = re.search(r'<g class="axis x-axis">(.*?)</g>', chart, re.S).group(1)
    times = re.findall(r'text-anchor="middle">(\d\d:\d\d)</text>', x)
    assert 5 <= len(times) <= 7 and all(t.endswith("0") for t in times)
    assert "UTC</text>" in x and "jobs per minute</text>" in y
    hist = re.search(r'<svg id="histogram".*?</svg>', page, re.S).group(0)
    labels = re.findall(r'transform="rotate\(-45[^"]*">([^<]+)</text>', hist)
    assert labels == list(m.LABELS)
    assert 'data-bucket="1.1s" data-count="4"' in hist


# --- 8. times in UTC, the local time on hover ----------------------------------------------------

def test_times_carry_their_utc_instant_for_the_local_time(client, r):
    r.zadd("dead", {dead_job("t1"): 1764170505.0})  # 2025-11-26 15:21:45 UTC
    page = client.get("/dead").text
    stamp = re.search(r'<tr data-jid="t1">.*?(<time [^>]*>[^<]*</time>)', page, re.S).group(1)
    assert 'datetime="2025-11-26T15:21:45+00:00"' in stamp
    assert 'title="2025-11-26 15:21:45 UTC"' in stamp
    detail = client.get("/dead/1764170505.0/t1").text
    assert '<time class="ts" datetime="2025-11-26T15:21:45+00:00">2025-11-26 15:21:45 UTC' \
           '</time>' in detail


# --- 9. names that are not UTF-8 ------------------------------------------------------------------

BAD = b"\xff\xfe"


def test_names_that_are_not_utf8_are_listed_and_addressed_exactly(served, r):
    # Given a queue named by bytes that are not UTF-8 (and one named as U+FFFD would read
    # them), a paused queue, a process, a task and a dead job of such names
    r.sadd("queues", BAD, "\ufffd\ufffd")
    r.lpush(b"queue:" + BAD, dead_job("odd1"), dead_job("odd2"))
    r.lpush("queue:\ufffd\ufffd", dead_job("lookalike"))
    live_process(r, "web-host:1:" + "x")
    r.sadd("processes", b"host:\xff:1")
    r.hset(b"host:\xff:1", mapping={"info": json.dumps({"hostname": "h", "pid": 9}),
                                    "busy": "1", "beat": str(time.time()), "quiet": "false"})
    bad_member = b'{"class":"X","jid":"bad\xff","args":[]}'
    r.hset(b"queued:task:t\xff", mapping={"description": "odd task", "sealed": "1",
                                           "created_at": repr(time.time()), "ttl_idle": "60"})
    r.sadd(b"queued:task:t\xff:finished", "j1")
    r.zadd("queued:tasks", {b"t\xff": time.time()})
    r.zadd("dead", {bad_member: 7.0, dead_job("fine"): 8.0})
    with httpx.Client(base_url=served, timeout=20, follow_redirects=True) as c:
        # Then every page answers, the stats bar counting them
        for path in ("/", "/queues", "/busy", "/dead", "/stats", "/metrics", "/cron"):
            assert c.get(path).status_code == 200, path
        bar = bar_of(c.get("/queues").text)
        assert bar["enqueued"][0] == 3 and bar["processes"][0] == 2
        # the queue is listed, its name shown with its bytes escaped
        rows = rows_by(c.get("/queues").text, "data-queue")
        assert set(rows) == {"\\xff\\xfe", "\ufffd\ufffd"}
        odd = rows["\\xff\\xfe"]
        # its link opens its own page, with its own jobs
        own = c.get(attr(odd, "href"))
        assert own.status_code == 200
        # (each byte marked as one, the name quoted as queuedctl shows it: a queue named by
        # the 8 characters \xff\xfe reads apart)
        assert heading(own.text).startswith(
            'Queue <code>"<span class="byte" title="a byte that is not UTF-8">\\xff</span>'
            '<span class="byte" title="a byte that is not UTF-8">\\xfe</span>"</code>')
        assert queue_rows(own.text) == ["odd1", "odd2"]
        # its Pause pauses exactly it, its Clear clears exactly it
        token = token_of(own.text)
        form = html.unescape(re.search(r'<form method="post" action="([^"]*)"', own.text)
                             .group(1))
        c.post(form, data={"csrf_token": token, "action": "pause"})
        assert r.smembers("paused") == {BAD}
        done = c.post(attr(odd, "action"), data={"csrf_token": token, "action": "clear"})
        assert flash_of(done.text) == 'cleared "\\xff\\xfe": 2 jobs deleted'
        assert r.llen(b"queue:" + BAD) == 0 and r.llen("queue:\ufffd\ufffd") == 1
        # the dead member that is not UTF-8 is listed, opens, and is deleted alone
        dead = c.get("/dead").text
        assert len(re.findall(r"<tr data-jid=", dead)) == 2
        link = [html.unescape(h) for h in re.findall(r'<a class="jid" href="([^"]*)"', dead)
                if "/7.0/" in html.unescape(h)][0]
        shown = c.get(link)
        assert shown.status_code == 200 and 'bad\\xff' in shown.text
        box = [v for v in re.findall(r'name="job" value="([^"]*)"', dead)
               if v.startswith("7.0|")]
        done = c.post("/dead", data={"csrf_token": token_of(dead), "scope": "selected",
                                     "action": "delete", "job": box})
        assert flash_of(done.text) == "deleted 1 job"
        assert r.zrange("dead", 0, -1) == [dead_job("fine")]
        # the process is listed, and its Quiet reaches exactly it
        busy = c.get("/busy").text
        procs = rows_by(busy, "data-identity")
        assert set(procs) == {"web-host:1:x", "host:\\xff:1"}
        done = c.post("/busy", data={
            "csrf_token": token_of(busy), "action": "quiet",
            **dict(re.findall(r'<input type="hidden" name="(identity~?)" value="([^"]*)">',
                              procs["host:\\xff:1"]))})
        assert flash_of(done.text) == 'quiet sent to "host:\\xff:1"'
        assert r.lrange(b"host:\xff:1-signals", 0, -1) == [b"TSTP"]
        # the task is listed, and its link opens its own page
        task_row = rows_by(c.get("/tasks").text, "data-task")["t\\xff"]
        task_page = c.get(attr(task_row, "href"))
        assert task_page.status_code == 200 and "odd task" in heading(task_page.text)
        assert 'data-state="finished">finished <b>1</b>' in task_page.text
        # and its link to its jobs in Dead lists exactly the task's (its id escaped in JSON)
        r.zadd("dead", {b'{"class":"X","jid":"tj","task_id":"t\\udcff"}': 9.0,
                        b'{"class":"X","jid":"other","task_id":"t"}': 10.0})
        to_dead = [html.unescape(h) for h in re.findall(r'<a href="(/dead\?[^"]*)"',
                                                        task_page.text)]
        assert queue_rows(c.get(to_dead[0]).text) == ["tj"]
        # and the Prometheus gauges name it by its escaped bytes
        assert 'queued_queue_paused{queue="\\\\xff\\\\xfe"} 1.0' in c.get("/metrics").text


# --- 5. a task's page: callbacks, completion, messages, retry its errors, delete it -------------

def test_a_complete_task_with_failures_says_how_many_and_acts(daemon, producer, r, redis_url):
    import queued
    import taskjobs
    from ctlrun import ctl_json
    from harness import wait_for
    # Given a task of 3 jobs that finish (saying so), 2 business failures and 2 buried, with
    # both callbacks, run by a live daemon to its end
    daemon(require=("taskjobs.py",), concurrency=2)
    task = queued.Task("promo 42", on_complete=taskjobs.TComplete,
                       on_success=taskjobs.TSuccess)
    with task:
        for i in range(3):
            taskjobs.TOk.perform_async(i)
        for i in range(2):
            taskjobs.TBusiness.perform_async(10 + i)
        buried = [taskjobs.TBury.perform_async(20 + i) for i in range(2)]
    wait_for(lambda: r.llen(taskjobs.CALLBACKS) == 1, 20, what="the on_complete callback")
    app = TestClient(create_app(redis_lib.Redis.from_url(redis_url)), base_url="http://localhost")
    page = app.get(f"/tasks/{task.id}").text
    # Then its state says how many failed, with queuedctl's numbers
    s = ctl_json("task", task.id, url=redis_url)["summary"]
    assert (s["finished"], s["failed"], s["error"], s["state"]) == (
        3, 2, 2, "complete, with failures")
    state = re.search(r'<span class="badge failed task-state">(.*?)</span>', page).group(1)
    assert state == "complete, 2 failed, 2 errors"
    assert f'data-percent="{s["percent"]}"' in page
    tabs = dict(re.findall(r'data-state="(\w+)">\w+ <b>([\d,]+)</b>', page))
    assert tabs == {"enqueued": "0", "working": "0", "finished": "3", "failed": "2",
                    "retry": "0", "error": "2"}
    listed = app.get("/tasks").text
    assert "complete, 2 failed, 2 errors</span>" in rows_by(listed, "data-task")[task.id]
    # its completion time, and its callbacks: on_complete pushed, on_success not
    info = task.info()
    assert filters.utc_text(info["completed_at"]) in re.search(
        r'<td class="completed">(.*?)</td>', page, re.S).group(1)
    callbacks = dict(re.findall(r'<tr class="callback" data-kind="(\w+)">(.*?)</tr>', page,
                                re.S))
    assert set(callbacks) == {"on_complete", "on_success"}
    assert "TComplete" in callbacks["on_complete"]
    assert re.search(r"pushed <time", callbacks["on_complete"])
    assert "not pushed: the task completed with failures" in callbacks["on_success"]
    (kind, tid, summary), = [json.loads(x) for x in r.lrange(taskjobs.CALLBACKS, 0, -1)]
    assert (kind, tid) == ("complete", task.id)
    # and the messages the finished jobs said
    finished = app.get(f"/tasks/{task.id}", params={"state": "finished"}).text
    assert sorted(re.findall(r"</time> (ok \d)</div>", finished)) == ["ok 0", "ok 1", "ok 2"]
    # When its errors are retried from the page
    token = token_of(page)
    done = app.post(f"/tasks/{task.id}", data={"csrf_token": token, "action": "retry_errors"})
    # Then the two dead jobs went back to their queue (and were buried again by the daemon)
    assert flash_of(done.text) == (f"retried 2 jobs of task {task.id} now (0 from Retries, "
                                   f"2 from Dead)")
    wait_for(lambda: all(r.hget(taskjobs.RUNS, j) == b"2" for j in buried), 20,
             what="the retried jobs to run again")
    # When it is deleted
    done = app.post(f"/tasks/{task.id}?then=tasks", data={"csrf_token": token,
                                                          "action": "delete"})
    # Then its keys are gone and the list says so
    assert flash_of(done.text) == (f"deleted task {task.id}: its jobs still waiting run "
                                   f"outside any task, and no callback is pushed")
    assert str(done.url.path) == "/tasks" and task.id not in rows_by(done.text, "data-task")
    assert r.keys(f"queued:task:{task.id}*") == [] and r.zscore("queued:tasks", task.id) is None
    assert app.get(f"/tasks/{task.id}").status_code == 404


def test_find_says_where_a_job_is_and_links_there(client, r):
    r.sadd("queues", "default")
    r.lpush("queue:default", *(dead_job(f"q{i}") for i in range(60)))
    r.zadd("dead", {dead_job("d1", error="Net::ReadTimeout"): 1000.0})
    page = client.get("/find", params={"jid": "q5"}).text
    (where,) = rows_by(page, "data-where").items()
    assert where[0] == "queue" and "place 6 of 60 (1 runs next)" in where[1]
    assert html.unescape(attr(where[1], "href")) == "/queues/default"
    deep = rows_by(client.get("/find", params={"jid": "q40"}).text, "data-where")["queue"]
    assert html.unescape(attr(deep, "href")) == "/queues/default?page=2"
    assert "q40" in queue_rows(client.get("/queues/default", params={"page": 2}).text)
    dead = rows_by(client.get("/find", params={"jid": "d1"}).text, "data-where")["dead"]
    assert "<code>d1</code>" in heading(client.get(html.unescape(attr(dead, "href"))).text)
    assert 'id="nowhere"' in client.get("/find", params={"jid": "nope"}).text
    # A queue's jids link here
    queue = client.get("/queues/default").text
    assert html.unescape(attr(rows_by(queue, "data-jid")["q0"], "href")) == "/find?jid=q0"


# --- names that mean something in a URL, on the new pages (issue 16's checks) -------------------

ODD = ["critical?old", "a#b", "p%41", "mailers/high", "with space", "ünï/cødé ✓", "..",
       'quo"te<b>', "x" * 300 + "?end"]


def test_a_queue_row_deletes_its_own_job_in_a_queue_of_any_name(served, r):
    for i, name in enumerate(ODD):
        r.sadd("queues", name)
        r.lpush(f"queue:{name}", dead_job(f"{i}-a"), dead_job(f"{i}-b"))
    with httpx.Client(base_url=served, timeout=20, follow_redirects=True) as c:
        rows = rows_by(c.get("/queues").text, "data-queue")
        for i, name in enumerate(ODD):
            own = c.get(attr(rows[name], "href")).text
            form = html.unescape(re.search(r'<form method="post" action="([^"]*)" '
                                           r'id="selected"', own).group(1))
            button = re.search(r'name="one" value="(delete\|[^"]*)"',
                               rows_by(own, "data-jid")[f"{i}-a"]).group(1)
            done = c.post(form, data={"csrf_token": token_of(own), "one": button})
            assert flash_of(done.text) == "deleted 1 job", name
            # (and the browser is back on that queue's page)
            assert f"{i}-b" in queue_rows(done.text) and f"{i}-a" not in queue_rows(done.text)
            assert [json.loads(j)["jid"] for j in r.lrange(f"queue:{name}", 0, -1)] == [
                f"{i}-b"], name
            # its jid links to Find, which finds it in that queue
            found = c.get(attr(rows_by(done.text, "data-jid")[f"{i}-b"], "href")).text
            place = rows_by(found, "data-where")["queue"]
            assert c.get(attr(place, "href")).status_code == 200
            assert f"{i}-b" in queue_rows(c.get(attr(place, "href")).text), name


def test_the_cron_page_acts_on_schedules_of_any_name(daemon, r, redis_url):
    names = ["nightly?report#1", "ünï cødé ✓", "a/b c"]
    daemon(require=("cronjobs.py",), concurrency=1, scheduler={"schedule": {
        n: {"cron": "0 0 * * *", "class": "Tick"} for n in names}})
    app = TestClient(create_app(redis_lib.Redis.from_url(redis_url)), base_url="http://localhost")
    for name in names:
        page = app.get("/cron").text
        form = rows_by(page, "data-name")[name]
        hidden = dict(re.findall(r'<input type="hidden" name="(name~?)" value="([^"]*)">', form))
        done = app.post("/cron", data={"csrf_token": token_of(page), "action": "disable",
                                       **{k: html.unescape(v) for k, v in hidden.items()}})
        assert flash_of(done.text).startswith(f"periodic job {name} disabled"), name
    assert {n: r.hget(f"cron_job:{n}", "status") for n in names} == {
        n: b"disabled" for n in names}
    assert r.hget("cron_job:py_every_second", "status") == b"enabled"


def test_the_menu_links_each_page_the_app_has(client):
    from starlette.routing import Route
    from queued.admin.web.frame import nav
    menu = re.search(r'<nav class="top">(.*?)</nav>', client.get("/").text, re.S).group(1)
    labels = re.findall(r'<a href="[^"]*" class="[^"]*">(\w+)</a>', menu)
    assert labels == ["Overview", "Busy", "Queues", "Scheduled", "Retries", "Dead", "Tasks",
                      "Cron", "Metrics", "Limits"]
    # an entry whose page the app does not have is left out
    routes = [r for r in client.app.routes if getattr(r, "name", None) != "limits"]
    assert "Limits" not in [label for _, label, _ in nav(routes)]
