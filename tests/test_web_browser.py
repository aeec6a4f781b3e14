"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright, against ``queuedctl web`` on a free port (the real command, in a subprocess), a real
redis-server and real daemons. One browser and one dashboard for the module; each test gets a
fresh page that must log no console error (a CSP violation is one), and saves a screenshot of
what it looked at into build/screenshots/ (the README links there)."""
from __future__ import annotations

import json
import os
import time

import pytest
from playwright.sync_api import sync_playwright

import jobs
import taskjobs
from conftest import IN_CI
from harness import ROOT, counts, wait_for
from webserve import serve


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
SHOTS = os.path.join(ROOT, "build", "screenshots")
SCRIPT_ARG = "<script>window.__pwned=1</script>"
DAEMON_REQUIRE = ("jobs.py", "taskjobs.py")


@pytest.fixture(scope="module")
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        if IN_CI:
            pytest.fail("chromium is not installed; CI must install it (scripts/test does)")
        pytest.skip("chromium not installed (apt-get install chromium chromium-driver)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def web(redis_server, tmp_path_factory):
    """``queuedctl web`` on a free loopback port; its base URL."""
    log = tmp_path_factory.mktemp("web") / "web.log"
    with serve(redis_server.url, str(log), "--poll", "0.5") as base:
        yield base


@pytest.fixture
def page(browser, web, request):
    """A fresh page on the dashboard; no console error or uncaught exception allowed."""
    context = browser.new_context(base_url=web, viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
          if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    pg.on("dialog", lambda d: d.accept())  # the confirmations of destructive buttons
    pg.console_errors = errors
    yield pg
    context.close()
    assert errors == []


def shot(page, name: str) -> None:
    os.makedirs(SHOTS, exist_ok=True)
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


def payload(jid, klass="Record", args=(), queue="default", **extra) -> bytes:
    msg = {"class": klass, "args": list(args), "jid": jid, "queue": queue, "retry": True,
           "created_at": time.time() - 60, "enqueued_at": time.time() - 60, **extra}
    return json.dumps(msg).encode()


def failed(jid, klass="Record", args=(), error=("RuntimeError", "boom"), **extra) -> bytes:
    return payload(jid, klass, args, error_class=error[0], error_message=error[1],
                   failed_at=time.time() - 30, retry_count=2, **extra)


def reload_until(page, predicate, what: str, timeout: float = 15):
    """Reload until ``predicate(page)`` holds: the pages are not live, Redis changes."""
    def check():
        page.reload()
        return predicate(page)
    return wait_for(check, timeout, interval=0.2, what=what)


# --- the tests ------------------------------------------------------------------------------

def test_every_page_loads_without_console_errors(page, daemon, producer, r):
    # Given a daemon running a job, jobs in every set, a task and per-class metrics
    d = daemon(concurrency=2, require=DAEMON_REQUIRE)
    gated = jobs.Gate.perform_async("pages")
    wait_for(lambda: r.hget(d.identity(), "busy") == b"1", 10, what="the gated job to run")
    future = time.time() + 3600
    r.zadd("schedule", {payload("s1", args=["later"]): future})
    r.zadd("retry", {failed("r1", args=[1]): future})
    r.zadd("dead", {failed("d1", args=[2], error=("KeyError", "'sku'")): time.time()})
    import queued
    task = queued.Task("pages task")
    with task:
        taskjobs.TOk.perform_async(1)
    now = time.time()
    r.hincrby(minute_key(now), "Record|p", 3)
    r.hincrby(minute_key(now), "Record|ms", 90)
    r.execute_command("BITFIELD", histogram_key("Record", now), "OVERFLOW", "SAT", "INCRBY",
                      "u16", "#1", 3)
    pages = {"overview": "/", "busy": "/busy", "queues": "/queues",
             "queue": "/queues/default", "scheduled": "/scheduled", "retries": "/retries",
             "dead": "/dead", "tasks": "/tasks", "task": f"/tasks/{task.id}",
             "metrics": "/job-metrics", "metrics-class": "/job-metrics/Record?period=1h"}
    # When each page is opened, Then it answers 200, renders its heading, logs no error
    for name, path in pages.items():
        response = page.goto(path)
        assert response.status == 200, path
        page.wait_for_selector("main h1")
        if name == "overview":
            page.wait_for_function("() => Number(document.getElementById('live').dataset.polls) >= 2")
        shot(page, name)
    # and a job's detail page is reached from its row
    page.goto("/dead")
    page.click("#jobs tbody tr[data-jid=d1] td:nth-child(2) a")
    page.wait_for_selector("#job")
    assert "KeyError" in page.inner_text("#job")
    shot(page, "job")
    assert page.console_errors == []
    jobs.open_gate(r, "pages")
    wait_for(lambda: counts(r, jobs.DONE).get(gated) == 1, 10, what="the gated job to end")


def test_script_argument_is_shown_as_text(page, r):
    # Given jobs whose argument is a script, in dead and in a queue
    r.zadd("dead", {failed("x1", args=[SCRIPT_ARG], error=("E", SCRIPT_ARG)): time.time()})
    r.lpush("queue:default", payload("x2", args=[SCRIPT_ARG]))
    r.sadd("queues", "default")
    # When the pages that show them are opened
    for path in ("/dead", "/queues/default", "/dead?arg=__pwned"):
        page.goto(path)
        # Then the argument is text on the page, and the script never ran
        assert SCRIPT_ARG in page.inner_text("#jobs")
        assert page.evaluate("typeof window.__pwned") == "undefined"
    page.click("#jobs tbody tr[data-jid=x1] td:nth-child(2) a")
    assert SCRIPT_ARG in page.inner_text("pre.args")
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_live_graph_updates_as_jobs_run(page, daemon, producer, r):
    daemon(concurrency=2, require=DAEMON_REQUIRE)
    page.goto("/")
    page.wait_for_function("() => Number(document.getElementById('live').dataset.polls) >= 2")
    assert page.inner_text("#stat-processed") == "0"
    # When 30 jobs run
    jobs.Record.perform_bulk([[i] for i in range(30)])
    # Then the totals and the graph follow, without a reload
    page.wait_for_function("() => document.getElementById('stat-processed').textContent === '30'")
    page.wait_for_function("() => Number(document.getElementById('live').dataset.maxProcessed) > 0")
    assert page.get_attribute("#live polyline.processed", "points") != ""
    shot(page, "overview-live")
    # When paused, the status says so; resumed, it follows again
    page.click("#live-pause")
    assert page.inner_text("#live-status") == "paused"
    jobs.Record.perform_bulk([[i] for i in range(10)])
    wait_for(lambda: r.get("stat:processed") == b"40", 10, what="40 processed")
    page.click("#live-pause")
    page.wait_for_function("() => document.getElementById('stat-processed').textContent === '40'")


def test_retry_button_moves_a_job_to_its_queue_and_the_daemon_runs_it(page, daemon, producer,
                                                                       r):
    # Given a job in Retries due in an hour, and a daemon
    daemon(concurrency=2, require=DAEMON_REQUIRE)
    r.zadd("retry", {failed("rt1", args=["again"]): time.time() + 3600})
    page.goto("/retries")
    # When its row is ticked and "Retry now" pressed
    page.check("#jobs tbody tr[data-jid=rt1] input[type=checkbox]")
    page.click("#selected button[value=retry]")
    page.wait_for_selector("p.flash")
    assert page.inner_text("p.flash") == "retried 1 job"
    # Then it left Retries, and the daemon ran it from its queue
    assert r.zcard("retry") == 0
    assert page.inner_text("#jobs tbody") == "no job"
    wait_for(lambda: counts(r, jobs.DONE).get("rt1") == 1, 10, what="the retried job to run")


def test_bulk_delete_of_a_filtered_selection_deletes_exactly_the_matches(page, r):
    # Given 30 dead jobs: 12 Billing timeouts, 8 Billing other errors, 10 Mail timeouts
    now = time.time()
    members = {}
    for i in range(30):
        klass, error = (("Billing", "Timeout") if i < 12 else ("Billing", "Refused")
                        if i < 20 else ("Mail", "Timeout"))
        members[failed(f"j{i}", klass, [i], (f"Net::{error}", "waited 5 s"))] = now - i
    r.zadd("dead", members)
    # When the dead set is searched by class and error, and every match deleted
    page.goto("/dead")
    page.fill("#search input[name=class]", "Billing")
    page.fill("#search input[name=error]", "timeout")
    page.click("#search button[type=submit]")
    page.wait_for_selector("#all-matches")
    assert page.locator("#jobs tbody tr").count() == 12
    shot(page, "dead-search")
    page.click("#all-matches button[value=delete]")
    page.wait_for_selector("p.flash")
    # Then exactly those 12 are gone
    assert page.inner_text("p.flash") == "deleted 12 jobs (every match)"
    left = {json.loads(m)["jid"] for m in r.zrange("dead", 0, -1)}
    assert left == {f"j{i}" for i in range(12, 30)}
    # When two ticked rows are deleted
    page.goto("/dead")
    page.check("#jobs tbody tr[data-jid=j12] input[type=checkbox]")
    page.check("#jobs tbody tr[data-jid=j25] input[type=checkbox]")
    page.click("#selected button[value=delete]")
    page.wait_for_selector("p.flash")
    # Then exactly those two are gone
    left = {json.loads(m)["jid"] for m in r.zrange("dead", 0, -1)}
    assert left == {f"j{i}" for i in range(13, 30)} - {"j25"}


def test_pause_from_queues_stops_the_daemon_taking_from_that_queue(page, daemon, producer, r):
    # Given a daemon serving low before default, and low known (it ran a job)
    d = daemon(concurrency=2, queues=["low", "default"], verbose=True, require=DAEMON_REQUIRE)
    first = jobs.Record.set(queue="low").perform_async("first")
    wait_for(lambda: counts(r, jobs.DONE).get(first) == 1, 10, what="low's first job")
    # When low is paused from the Queues page
    page.goto("/queues")
    page.click("#queues tr[data-queue=low] button[value=pause]")
    page.wait_for_selector("#queues tr[data-queue=low] .badge.paused")
    d.wait_log("paused queues now: low")
    held = [jobs.Record.set(queue="low").perform_async(f"low-{i}") for i in range(3)]
    ran = jobs.Record.perform_async("default-1")
    # Then default's job runs while low's stay in their queue
    wait_for(lambda: counts(r, jobs.DONE).get(ran) == 1, 10, what="default's job")
    assert r.llen("queue:low") == 3
    assert not any(j in counts(r, jobs.RUNS) for j in held)
    page.reload()
    assert page.inner_text("#queues tr[data-queue=low] td.size") == "3"
    shot(page, "queues-paused")
    # When unpaused, they run
    page.click("#queues tr[data-queue=low] button[value=unpause]")
    page.wait_for_selector("#queues tr[data-queue=low] .badge.ok")
    wait_for(lambda: all(counts(r, jobs.DONE).get(j) == 1 for j in held), 10,
             what="low's jobs after the unpause")


#: Names that mean something in a URL (issue 16): each row must act on its own queue or job.
URL_NAMES = ["critical?old", "critical", "a#b", "p%41", "mailers/high", "", "..", "ünï cødé"]


def row(table: str, attribute: str, value: str) -> str:
    return f"#{table} tr[{attribute}={json.dumps(value, ensure_ascii=False)}]"


def test_each_queue_row_opens_and_clears_its_own_queue(page, r):
    # Given queues whose names hold ? # % / .. and the empty name, each with i + 1 jobs
    for i, name in enumerate(URL_NAMES):
        r.sadd("queues", name)
        r.lpush(f"queue:{name}", *(payload(f"{i}-{k}", queue=name) for k in range(i + 1)))
    for i, name in enumerate(URL_NAMES):
        # When its row's link is clicked, Then its own page opens, with its own jobs
        page.goto("/queues")
        page.click(f"{row('queues', 'data-queue', name)} td a")
        page.wait_for_selector("#jobs")
        assert page.text_content("main h1 code") == name
        assert page.locator("#jobs tbody tr").count() == i + 1
    shot(page, "queues-odd-names")
    for i, name in enumerate(URL_NAMES):
        # When its row's Clear is pressed on the list (and confirmed)
        before = {n: r.llen(f"queue:{n}") for n in URL_NAMES}
        page.goto("/queues")
        page.click(f"{row('queues', 'data-queue', name)} button[value=clear]")
        page.wait_for_selector("p.flash")
        # Then exactly that queue was cleared
        assert page.inner_text("p.flash") == f"cleared {name}: {i + 1} jobs deleted"
        assert {n: r.llen(f"queue:{n}") for n in URL_NAMES} == {**before, name: 0}


def test_each_dead_row_opens_and_deletes_its_own_job(page, r):
    # Given dead jobs whose jids hold / ? # % and the empty jid
    jids = ["ab/cd", "x?y#z", "p%41", "", "..", "plain"]
    r.zadd("dead", {failed(jid, args=[i]): time.time() - i for i, jid in enumerate(jids)})
    for jid in jids:
        # When its row's link is clicked, Then its own job's page opens
        page.goto("/dead")
        page.click(f"{row('jobs', 'data-jid', jid)} td:nth-child(2) a")
        page.wait_for_selector("#job")
        assert page.text_content("main h1 code") == jid
    for jid in jids:
        # When its row is ticked and deleted, Then exactly that job is gone
        page.goto("/dead")
        page.check(f"{row('jobs', 'data-jid', jid)} input[type=checkbox]")
        page.click("#selected button[value=delete]")
        page.wait_for_selector("p.flash")
        assert page.inner_text("p.flash") == "deleted 1 job"
        left = {json.loads(m)["jid"] for m in r.zrange("dead", 0, -1)}
        assert jid not in left and len(left) == len(jids) - 1 - jids.index(jid)


def test_quiet_from_busy_shows_quiet(page, daemon, r):
    d = daemon(concurrency=1, require=DAEMON_REQUIRE)
    identity = d.identity()
    row = f"#processes tr[data-identity='{identity}']"
    page.goto("/busy")
    assert page.inner_text(f"{row} td.state") == "running"
    # When Quiet is pressed on its row
    page.click(f"{row} button[value=quiet]")
    page.wait_for_selector("p.flash")
    # Then, once its heartbeat has read the signal, the page shows it quiet
    reload_until(page, lambda p: p.inner_text(f"{row} td.state") == "quiet", "quiet shown")
    assert r.hget(identity, "quiet") == b"true"
    shot(page, "busy-quiet")


def test_task_progress_bar_reaches_100_percent(page, daemon, producer, r):
    import queued
    daemon(concurrency=2, require=DAEMON_REQUIRE)
    task = queued.Task("promo 42")
    with task:
        for i in range(6):
            taskjobs.TOk.perform_async(i)
        taskjobs.TBusiness.perform_async(99)
    page.goto(f"/tasks/{task.id}")
    # Then the bar reaches 100 % as the jobs end, and the failure is listed with its reason
    reload_until(page, lambda p: p.get_attribute("#task-progress", "data-percent") == "100",
                 "the task's bar at 100 %")
    assert "price below cost" in page.inner_text("#records")
    shot(page, "task-complete")
    page.goto("/tasks")
    bar = page.locator(f"#tasks tr[data-task='{task.id}'] progress")
    assert bar.get_attribute("value") == "100"


def minute_key(t):
    from queued.admin.metrics import minute_key as key
    return key(t)


def histogram_key(klass, t):
    from queued.admin.metrics import histogram_key as key
    return key(klass, t)


def test_limits_and_locks_pages_with_a_daemon_using_them(page, daemon, producer, r):
    # Given a daemon whose job holds the only unit of a concurrent limiter while another is
    # parked over its limit, a unique job pending, and a limiter whose name is a script
    import limitjobs
    import queued
    d = daemon(concurrency=2, require=("limitjobs.py",))
    holder = limitjobs.HoldsNever.perform_async("web")
    wait_for(lambda: counts(r, limitjobs.RUNS).get(holder) == 1, 10, what="the holder")
    limitjobs.WantsNever.perform_async("w")
    wait_for(lambda: r.zcard("queued:limiter:{never}:parked") == 1, 10, what="the parked job")
    unique = limitjobs.Unique.perform_in(3600, "web", None)
    with queued.Limiter.window(SCRIPT_ARG, 3, 60):
        pass
    # When the Limits page is opened (from the menu)
    page.goto("/")
    page.click("nav a:text('Limits')")
    page.wait_for_selector("#limiters")
    # Then it shows the limiter in use, its over-limit job parked, the script as text
    row = "#limiters tr[data-limiter=never]"
    assert page.inner_text(f"{row} td.in-use") == "1"
    assert page.inner_text(f"{row} td.parked") == "1"
    assert page.inner_text(f"{row} td.overlimit") == "1"
    assert SCRIPT_ARG in page.inner_text("#limiters")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert "over-limit reschedules 1" in page.inner_text("#counters")
    shot(page, "limits")
    # And the unique locks page lists the pending job's lock; Give up releases it
    page.click("#counters a")
    page.wait_for_selector("#locks")
    from queued.unique import digest as unique_digest
    digest = unique_digest({"class": "Unique", "queue": "default", "args": ["web", None]})
    lock_row = page.locator(f"#locks tr[data-digest='{digest}']")
    assert lock_row.locator("td.jid").inner_text() == unique
    shot(page, "locks")
    lock_row.locator("button[value=release]").click()
    page.wait_for_selector("p.flash")
    assert page.inner_text("p.flash") == f"gave up the lock {digest}"
    assert r.get(f"queued:unique:{digest}") is None
    assert limitjobs.Unique.perform_in(3600, "web", None) is not None
    r.set(limitjobs.GATE + "web", 1)
    wait_for(lambda: len(counts(r, limitjobs.DONE)) == 2, 15, what="both limiter jobs done")
    assert d.stop() == 0
