"""Sidekiq's Web UI (Debian's sidekiq 6.4.1 ``Sidekiq::Web``, served by ``rackup -s webrick`` on
loopback) renders a queued daemon: its process and running job on /busy, its queues, retries,
dead and scheduled jobs, its stats; and its Quiet/Stop buttons control the queued master.

Pages are fetched over HTTP with urllib, as a browser would (cookie session + CSRF token for
the POSTs). Missing ruby, sidekiq, rack or webrick: skipped locally, a failure under CI.
"""
from __future__ import annotations

import html
import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import jobs
import pytest
from harness import counts, wait_for

from .sidekiq_support import INTEROP_REQUIRE, free_port, require_ruby

HOST = os.environ.get("DYNO") or socket.gethostname()

CONFIG_RU = '''require "sidekiq/web"
use Rack::Session::Cookie, secret: "x" * 64, same_site: true, max_age: 86400
Sidekiq.configure_client { |c| c.redis = {url: %s} }
run Sidekiq::Web
'''


def find_rackup() -> str | None:
    """Debian's ruby-rack ships /usr/bin/rackup (and a copy inside the gem's bin/)."""
    for cand in (shutil.which("rackup"), "/usr/bin/rackup",
                 "/usr/share/rubygems-integration/all/gems/rack-2.2.22/bin/rackup"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


class WebUI:
    """One rackup process serving Sidekiq::Web; a cookie-keeping HTTP client for it."""

    def __init__(self, rackup: str, redis_url: str, tmp_path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config = tmp_path / "config.ru"
        self.config.write_text(CONFIG_RU % json.dumps(redis_url))
        self.logpath = tmp_path / "rackup.log"
        self.log = open(self.logpath, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [rackup, "-s", "webrick", "-o", "127.0.0.1", "-p", str(self.port), str(self.config)],
            cwd=str(tmp_path), stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def wait_ready(self, timeout: float = 30.0) -> None:
        def up():
            if self.proc.poll() is not None:
                raise AssertionError(f"rackup exited with {self.proc.returncode}:\n"
                                     f"{self.logpath.read_text(errors='replace')}")
            try:
                return self.get("/stats")[0] == 200
            except (urllib.error.URLError, ConnectionError, OSError):
                return False
        wait_for(up, timeout, interval=0.1, what="rackup serving Sidekiq::Web")

    def get(self, path: str) -> tuple[int, str]:
        with self.opener.open(self.base + path, timeout=15) as resp:
            return resp.status, resp.read().decode("utf-8")

    def post(self, path: str, form: dict) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode()
        with self.opener.open(self.base + path, data=data, timeout=15) as resp:
            return resp.status, resp.read().decode("utf-8")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


@pytest.fixture
def web_ui(ruby, redis_url, tmp_path):
    """Sidekiq's Web UI on a free loopback port, reading the test Redis; stopped by PID."""
    require_ruby('require "sidekiq/web"; require "webrick"; require "rack/session/cookie"',
                 "ruby-rack + ruby-webrick (Sidekiq's Web UI)")
    rackup = find_rackup()
    if rackup is None:
        require_ruby("exit 1", "rackup (ruby-rack)")
    for attempt in range(3):  # a new port if another process took the free one first
        ui = WebUI(rackup, redis_url, tmp_path)
        try:
            ui.wait_ready()
            break
        except AssertionError:
            ui.stop()
            if attempt == 2 or "Address already in use" not in ui.logpath.read_text(
                    errors="replace"):
                raise
    try:
        yield ui
    finally:
        ui.stop()


def page(ui: WebUI, path: str) -> str:
    status, body = ui.get(path)
    assert status == 200, f"GET {path}: {status}"
    return html.unescape(body)


def test_web_ui_pages_render_queued(daemon, producer, r, web_ui):
    # Given a tagged queued daemon (one worker) that ran a job, failed one into `retry`
    # (with a backtrace) and one into `dead`
    d = daemon(concurrency=1, tag="webtag", labels=["green"], require=INTEROP_REQUIRE)
    identity = d.identity()
    ok = jobs.Record.perform_async("web-ok")
    failing = producer.push({"class": "ApiFailLate", "args": ["web"], "backtrace": True})
    dying = jobs.Hooks.perform_async(True)
    wait_for(lambda: counts(r, jobs.DONE).get(ok) == 1 and r.zcard("retry") == 1
             and r.zcard("dead") == 1, 15, what="the first jobs")
    wait_for(lambda: r.get("stat:processed") == b"3", 5, what="the stats flush")
    # And a long job running, one job waiting behind it and one scheduled for later
    sleeper = jobs.Sleep.perform_async(30, "web-sleep")
    wait_for(lambda: counts(r, jobs.RUNS).get(sleeper), 10, what="the long job to start")
    wait_for(lambda: r.hget(identity, "busy") == b"1", 5, what="a beat showing the busy job")
    waiting = jobs.Record.perform_async("web-waiting")
    jobs.Record.perform_in(3600, "web-later")

    # When the Busy page is fetched over HTTP
    busy = page(web_ui, "/busy")
    # Then it shows queued's process: hostname:pid, tag, label, queues, threads, busy, and
    # its identity for the Quiet/Stop buttons ...
    row = re.search(r'<td class="box">\s*' + re.escape(f"{HOST}:{d.pid}") +
                    r'\s*<span class="label label-success">webtag</span>'
                    r'\s*<span class="label label-info">green</span>'
                    r'\s*<br>\s*<b>Queues: </b>\s*default\s*</td>.*?</tr>', busy, re.DOTALL)
    assert row, busy
    assert re.search(r"<td>[\d,.]+ [KMG]B</td>\s*<td>1</td>\s*<td>1</td>", row[0])  # rss, 1, 1
    assert f'<input type="hidden" name="identity" value="{identity}"/>' in row[0]
    assert ">quiet</span>" not in row[0]
    # ... and the running job: process identity, jid, queue, class and arguments
    assert re.search(rf"<td>{identity}</td>\s*<td>\w+</td>\s*<td>{sleeper}</td>\s*<td>\s*"
                     r'<a href="/queues/default">default</a>\s*</td>\s*<td>\s*Sleep\s*</td>'
                     r'\s*<td>\s*<div class="args">30, "web-sleep"</div>', busy), busy

    # And the other pages render queued's data
    dashboard = page(web_ui, "/")
    assert "Dashboard" in dashboard and "redis_version" in dashboard
    queues = page(web_ui, "/queues")
    # (queue default: size 1, and a latency in seconds from the enqueued_at queued wrote)
    assert re.search(r'<a href="/queues/default">default</a>\s*</td>\s*<td>1 </td>'
                     r"\s*<td>\d+(\.\d+)? </td>", queues), queues
    assert waiting in page(web_ui, "/queues/default")
    retries = page(web_ui, "/retries")
    assert 'RuntimeError: late boom ünïcødé ["web"]' in retries and "ApiFailLate" in retries
    # (the retry's own page decodes queued's compressed backtrace)
    (link,) = set(re.findall(r"retries/(\d+\.\d+-" + failing + ")", retries))
    detail = page(web_ui, "/retries/" + link)
    assert "Error Backtrace" in detail and "interop_jobs.py:" in detail
    assert "in `perform'" in detail
    morgue = page(web_ui, "/morgue")
    assert "Hooks" in morgue and "ValueError: hook test" in morgue
    (link,) = set(re.findall(r"morgue/(\d+\.\d+-" + dying + ")", morgue))
    assert dying in page(web_ui, "/morgue/" + link)
    scheduled = page(web_ui, "/scheduled")
    assert "Record" in scheduled and "web-later" in scheduled
    stats = json.loads(page(web_ui, "/stats"))["sidekiq"]
    assert {k: stats[k] for k in ("processed", "failed", "busy", "processes", "enqueued",
                                  "scheduled", "retries", "dead")} == {
        "processed": 3, "failed": 2, "busy": 1, "processes": 1, "enqueued": 1, "scheduled": 1,
        "retries": 1, "dead": 1}
    assert json.loads(page(web_ui, "/stats/queues")) == {"default": 1}


def csrf_token(body: str) -> str:
    return re.search(r"name='authenticity_token' value='([^']+)'", body)[1]


def test_web_ui_quiet_and_stop_buttons_control_queued(daemon, producer, r, web_ui):
    # Given a queued daemon running a long job, with a short shutdown timeout
    d = daemon(concurrency=1, shutdown_timeout=1)
    identity = d.identity()
    sleeper = jobs.Sleep.perform_async(30, "web-quiet")
    wait_for(lambda: counts(r, jobs.RUNS).get(sleeper), 10, what="the long job to start")
    wait_for(lambda: r.hget(identity, "busy") == b"1", 5, what="a beat showing the busy job")
    # When its Quiet button is pressed on the Busy page
    status, _ = web_ui.post("/busy", {"identity": identity, "quiet": "1",
                                         "authenticity_token": csrf_token(page(web_ui, "/busy"))})
    assert status == 200  # (after the redirect back to /busy)
    # Then the master goes quiet and the page labels it so (no Quiet button any more)
    d.wait_log("remote signal TSTP", 10)
    wait_for(lambda: r.hget(identity, "quiet") == b"true", 5, what='quiet "true" in the beat')
    busy = page(web_ui, "/busy")
    assert '<span class="label label-danger">quiet</span>' in busy
    assert 'name="quiet" value="1">Quiet</button>' not in busy
    # When its Stop button is pressed
    status, _ = web_ui.post("/busy", {"identity": identity, "stop": "1",
                                      "authenticity_token": csrf_token(busy)})
    assert status == 200
    # Then the master stops (exit 0) within its 1 s shutdown timeout, and the job it had to
    # interrupt is back at the head of its queue: nothing lost
    assert d.wait(20) == 0
    assert "remote signal TERM" in d.output()
    assert [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)] == [sleeper]
    assert counts(r, jobs.RUNS) == {sleeper: 1} and counts(r, jobs.DONE) == {}
    assert identity.encode() not in r.smembers("processes")
    assert "Processes" in page(web_ui, "/busy") and identity not in page(web_ui, "/busy")
