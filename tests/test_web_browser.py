"""The dashboard in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright, against ``queuedctl web`` on a free port (the real command, in a subprocess), a real
redis-server and real daemons. One browser and one dashboard for the module; each test gets a
fresh page that must log no console error (a CSP violation is one), and saves a screenshot of
what it looked at into build/screenshots/ (the README links there)."""
from __future__ import annotations

import json
import os
import re
import time

import pytest
from playwright.sync_api import sync_playwright

import jobs
import taskjobs
from conftest import IN_CI
from harness import ROOT, counts, wait_for
from queued.admin.ctltext import name as ctl_name
from test_admin_exact import member
from test_web_exact import cron_job
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
    dialogs: list[str] = []  # the questions asked (the confirmations of destructive buttons)
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    pg.console_errors = errors
    pg.dialogs = dialogs
    yield pg
    context.close()
    assert errors == []


def shot(page, name: str, full_page: bool = True) -> None:
    os.makedirs(SHOTS, exist_ok=True)
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=full_page)


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
    # on axes: jobs per second from 0 to a round number above the peak, seconds ago to now
    y = [t.text_content() for t in page.query_selector_all("#live .y-label")]
    peak = float(page.get_attribute("#live", "data-max-processed"))
    ticks = [float(v.replace(",", "")) for v in y if v]
    assert ticks[0] == 0 and ticks[-1] >= peak and len(ticks) >= 2
    x = [t.text_content() for t in page.query_selector_all("#live .x-label") if t.text_content()]
    assert x[0] == "now" and all(v.startswith("-") and v.endswith(" s") for v in x[1:])
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
    # and the page says how many match in the whole set
    page.wait_for_function("() => document.getElementById('match-count').dataset.total")
    assert page.inner_text("#match-count") == "12 matches in 30 jobs"
    page.click("#all-matches button[value=delete]")
    page.wait_for_selector("p.flash")
    # Then the question said how many, and exactly those 12 are gone
    assert page.dialogs == ["Delete 12 jobs that match this search?"]
    assert page.inner_text("p.flash") == ("deleted 12 jobs of the 12 counted when asked (every "
                                          "match then; any since are left)")
    left = {json.loads(m)["jid"] for m in r.zrange("dead", 0, -1)}
    assert left == {f"j{i}" for i in range(12, 30)}
    # When two ticked rows are deleted
    page.goto("/dead")
    page.check("#jobs tbody tr[data-jid=j12] input[type=checkbox]")
    page.check("#jobs tbody tr[data-jid=j25] input[type=checkbox]")
    page.click("#selected button[value=delete]")
    page.wait_for_selector("p.flash:has-text('deleted 2 jobs')")
    # Then the question counted them, and exactly those two are gone
    assert page.dialogs[-1] == "Delete 2 selected jobs?"
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
        assert page.text_content("main h1 code") == ctl_name(name)  # ("" for the empty one)
        assert page.locator("#jobs tbody tr").count() == i + 1
    shot(page, "queues-odd-names")
    for i, name in enumerate(URL_NAMES):
        # When its row's Clear is pressed on the list (and confirmed)
        before = {n: r.llen(f"queue:{n}") for n in URL_NAMES}
        page.goto("/queues")
        page.click(f"{row('queues', 'data-queue', name)} button[value=clear]")
        page.wait_for_selector("p.flash")
        # Then exactly that queue was cleared
        jobs = f"{i + 1} job{'s' if i else ''}"
        assert page.inner_text("p.flash") == (f"cleared {ctl_name(name)}: {jobs} deleted of the "
                                              f"{i + 1} counted when asked (jobs pushed since "
                                              f"stay)")
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
        assert page.text_content("main h1 code") == ctl_name(jid)  # ("" for the empty jid)
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


# --- on call (issue 20) -------------------------------------------------------------------------

def bar(page) -> dict[str, str]:
    return {el.get_attribute("id")[len("stat-"):]: el.inner_text()
            for el in page.query_selector_all("#statsbar .value")}


def test_the_stats_bar_is_on_every_page_and_each_figure_opens_its_page(page, r):
    r.zadd("retry", {failed("r1"): time.time() + 60, failed("r2"): time.time() + 90})
    r.zadd("dead", {failed("d1"): time.time()})
    r.sadd("queues", "default")
    r.lpush("queue:default", payload("q1"))
    r.set("stat:processed", 12345)
    want = {"processed": "12,345", "failed": "0", "busy": "0", "enqueued": "1",
            "scheduled": "0", "retries": "2", "dead": "1", "processes": "0"}
    for path in ("/", "/busy", "/queues", "/queues/default", "/scheduled", "/retries", "/dead",
                 "/tasks", "/cron", "/job-metrics"):
        page.goto(path)
        assert bar(page) == want, path
        assert page.inner_text("#footer .redis").startswith("redis://127.0.0.1:")
    for figure, heading in (("retries", "Retries"), ("dead", "Dead"), ("enqueued", "Queues"),
                            ("busy", "Busy"), ("processed", "Overview")):
        page.goto("/cron")
        page.click(f"#statsbar a.stat-{figure}")
        page.wait_for_selector("main h1")
        assert page.inner_text("main h1").startswith(heading), figure
    # A message in a link is not the dashboard's: nothing is shown
    page.goto("/queues?msg=All+jobs+retried%2C+nothing+to+do")
    assert page.locator("p.flash").count() == 0


CRON = {"schedule": {
    "berlin_morning": {"cron": "0 9 * * * Europe/Berlin", "class": "Tick",
                       "description": "reports at nine, Berlin time"},
    "every_minute": {"cron": "0 * * * * *", "class": "Tick"},
    "often": {"every": "30s", "class": "Tick", "enabled": False}}}


def test_cron_page_lists_pushes_disables_and_enables(page, daemon, r):
    # Given a master with three schedules (one in Berlin's time, one every 30 s, disabled)
    daemon(require=("cronjobs.py",), concurrency=1, scheduler=CRON)
    wait_for(lambda: r.exists("cron_job:often"), 10, what="the schedules in Redis")
    page.goto("/cron")
    rows = "#cron tbody tr"
    assert page.locator(rows).count() == 5  # (and cronjobs.py's two @queued.periodic)
    berlin = "#cron tr[data-name=berlin_morning]"
    assert page.inner_text(f"{berlin} td.schedule") == "0 9 * * * Europe/Berlin"
    assert page.inner_text(f"{berlin} td.zone") == "Europe/Berlin"
    assert page.inner_text("#cron tr[data-name=often] td.schedule") == "every 30s"
    assert page.inner_text("#cron tr[data-name=often] td.state") == "disabled"
    shot(page, "cron")
    # When every_minute is disabled (and the question confirmed)
    minute = "#cron tr[data-name=every_minute]"
    page.click(f"{minute} button[value=disable]")
    page.wait_for_selector("p.flash")
    # Then it is, on the page and in Redis
    assert page.dialogs == ["Disable every_minute? No master pushes it until it is enabled "
                            "again."]
    assert page.inner_text(f"{minute} td.state") == "disabled"
    assert page.inner_text(f"{minute} td.next") == "-"
    assert r.hget("cron_job:every_minute", "status") == b"disabled"
    # When Enqueue now is pressed on the disabled one, one run is pushed all the same
    before = r.llen("queue:ticks")
    page.click(f"{minute} button[value=enqueue]")
    # (the page still says it was disabled until the browser is sent back)
    page.wait_for_selector("p.flash:has-text('pushed Tick jid=')")
    assert page.inner_text("p.flash").startswith("pushed Tick jid=")
    assert r.llen("queue:ticks") == before + 1
    shot(page, "cron-disabled")
    # And enabled again, it has a next run
    page.click(f"{minute} button[value=enable]")
    page.wait_for_selector(f"{minute} .badge.ok")
    assert page.inner_text(f"{minute} td.next") != "-"


def test_queue_page_deletes_one_job_and_moves_ticked_ones_to_the_front(page, r):
    r.sadd("queues", "default")
    r.lpush("queue:default", *(payload(f"q{i}", args=[i]) for i in range(30)))

    def order():
        return [json.loads(j)["jid"] for j in reversed(r.lrange("queue:default", 0, -1))]
    page.goto("/queues/default")
    # When a row's own Delete is pressed (and confirmed)
    page.click("#jobs tr[data-jid=q3] button[value^=delete]")
    page.wait_for_selector("p.flash")
    # Then exactly that job is gone
    assert page.dialogs == ["Delete this job?"]
    assert page.inner_text("p.flash") == "deleted 1 job"
    assert order() == [f"q{i}" for i in range(30) if i != 3]
    # When two rows are ticked and moved to the front
    page.check("#jobs tr[data-jid=q10] input[type=checkbox]")
    page.check("#jobs tr[data-jid=q12] input[type=checkbox]")
    page.click("#selected button[value=run_next]")
    page.wait_for_selector("p.flash:has-text('moved 2 jobs')")  # (not the delete's message)
    # Then the question counted them, and they run next, in their order
    assert page.dialogs[-1] == "Move 2 selected jobs to the front of default?"
    assert page.inner_text("p.flash") == "moved 2 jobs to the front"
    assert order()[:3] == ["q10", "q12", "q0"]
    assert [t.get_attribute("data-jid") for t in page.query_selector_all("#jobs tbody tr")][:3] \
        == ["q10", "q12", "q0"]
    shot(page, "queue-actions")


def test_times_show_the_browsers_local_time_on_hover(browser, web, r):
    context = browser.new_context(base_url=web, timezone_id="Europe/Berlin", locale="en-GB")
    try:
        pg = context.new_page()
        r.zadd("dead", {failed("t1"): 1764170505.0})  # 2025-11-26 15:21:45 UTC
        pg.goto("/dead/1764170505.0/t1")
        stamp = pg.locator("#job time").first
        assert stamp.inner_text() == "2025-11-26 15:21:45 UTC"
        # (16:21:45 in Berlin, an hour ahead in November)
        assert stamp.get_attribute("title") == "your time: 26 Nov 2025, 16:21:45 CET"
        pg.goto("/dead")
        ago = pg.locator("#jobs tr[data-jid=t1] time")
        assert ago.inner_text().endswith(" ago")
        assert ago.get_attribute("title") == ("2025-11-26 15:21:45 UTC\n"
                                              "your time: 26 Nov 2025, 16:21:45 CET")
    finally:
        context.close()


def test_a_queue_named_by_bytes_that_are_not_utf8(page, r):
    # Given a queue whose name is the bytes \xff\xfe (a producer may push there)
    r.sadd("queues", b"\xff\xfe", "default")
    r.lpush(b"queue:\xff\xfe", payload("odd1"), payload("odd2"))
    page.goto("/queues")
    odd = row("queues", "data-queue", "\\xff\\xfe")
    assert page.inner_text(f"{odd} td a") == '"\\xff\\xfe"'
    shot(page, "queues-not-utf8")
    # When its link is clicked, Then its own page opens with its jobs
    page.click(f"{odd} td a")
    page.wait_for_selector("#jobs")
    assert page.text_content("main h1 code") == '"\\xff\\xfe"'
    assert page.locator("#jobs tbody tr").count() == 2
    # When it is cleared from there, Then exactly it is
    page.click("#queue-actions button[value=clear]")
    page.wait_for_selector("p.flash")
    assert page.dialogs == ['Delete all 2 jobs of queue "\\xff\\xfe"?']
    assert page.inner_text("p.flash") == ('cleared "\\xff\\xfe": 2 jobs deleted of the 2 '
                                          'counted when asked (jobs pushed since stay)')
    assert r.llen(b"queue:\xff\xfe") == 0 and r.smembers("queues") == {b"default"}


LONG_QUEUE = "billing-" + "reconciliation-" * 8 + "eu-west-1"
LONG_CLASS = "Billing::Enterprise::Invoices::" + "Reconciliation" * 5 + "Job"
UNBROKEN_QUEUE = "Billing" + "ReconciliationOfInvoices" * 8


def test_long_names_and_a_set_of_100000_jobs_read_well(page, r):
    # Given 100,000 dead jobs (1 in 50 of a long class name, with a long error), and a queue
    # with a long name and long arguments
    pipe = r.pipeline(transaction=False)
    now = time.time()
    for start in range(0, 100_000, 10_000):
        pipe.zadd("dead", {failed(f"d{i:06}", LONG_CLASS if i % 50 == 0 else "Mail",
                                  [i, "x" * 40],
                                  ("Net::ReadTimeout", "Net::ReadTimeout with #<TCPSocket:(closed)> "
                                   "after waiting 30 s for https://api.example.com/v2/invoices")
                                  if i % 50 == 0 else ("KeyError", "'sku'")): now - i
                           for i in range(start, start + 10_000)})
    pipe.execute()
    r.sadd("queues", LONG_QUEUE, "default", UNBROKEN_QUEUE)
    r.lpush(f"queue:{LONG_QUEUE}", *(payload(f"L{i}", LONG_CLASS, ["a" * 300, {"k": i}],
                                             LONG_QUEUE) for i in range(3)))
    r.lpush(f"queue:{UNBROKEN_QUEUE}", payload("U0", "Mail", [], UNBROKEN_QUEUE))
    page.goto("/queues")
    shot(page, "queues-long-names")
    # (a name with no place to break keeps every column on the screen: its cell wraps)
    width = page.evaluate("() => document.documentElement.clientWidth")
    assert page.evaluate("() => document.getElementById('queues').getBoundingClientRect()"
                         ".right") <= width
    page.click(f"{row('queues', 'data-queue', LONG_QUEUE)} td a")
    page.wait_for_selector("#jobs")
    assert page.locator("#jobs tbody tr").count() == 3
    shot(page, "queue-long-names")
    # The dead set: 25 rows a page, then 100 as chosen
    page.goto("/dead")
    assert page.inner_text("main h1 small") == "100,000 jobs"
    assert page.locator("#jobs tbody tr").count() == 25
    assert "1-25 of 100,000" in page.inner_text(".pager")
    shot(page, "dead-100k")
    page.click(".pager .sizes a[data-size='100']")
    page.wait_for_selector(".pager .sizes b.current")
    assert page.inner_text(".pager .sizes b.current") == "100"
    assert page.locator("#jobs tbody tr").count() == 100
    # A search of it says its total
    page.fill("#search input[name=class]", LONG_CLASS)
    page.click("#search button[type=submit]")
    page.wait_for_function("() => document.getElementById('match-count').dataset.total",
                           timeout=30_000)
    assert page.inner_text("#match-count") == "2,000 matches in 100,000 jobs"
    # (a step reads until it has the chosen size of matches, or its budget of jobs read,
    # and shows what it found; the next step keeps the size)
    shown = page.locator("#jobs tbody tr").count()
    assert shown > 0 and page.inner_text(".pager").startswith(f"{shown} matches shown")
    assert "size=100" in page.get_attribute(".pager a[rel=next]", "href")
    shot(page, "dead-100k-search", full_page=False)  # (the top: 100 rows make it long)
    # Every match retried asks with the number first
    page.click("#all-matches button[value=retry]")
    page.wait_for_selector("p.flash", timeout=60_000)
    assert page.dialogs == ["Retry 2,000 jobs that match this search now?"]
    assert page.inner_text("p.flash") == ("retried 2,000 jobs of the 2,000 counted when asked "
                                          "(every match then; any since are left)")
    assert r.zcard("dead") == 98_000


def test_task_page_with_failures_callbacks_and_actions(page, daemon, producer, r):
    import queued
    daemon(concurrency=2, require=DAEMON_REQUIRE)
    task = queued.Task("promo 42: register 7 products", on_complete=taskjobs.TComplete,
                       on_success=taskjobs.TSuccess)
    with task:
        for i in range(3):
            taskjobs.TOk.perform_async(i)
        for i in range(2):
            taskjobs.TBusiness.perform_async(10 + i)
        buried = [taskjobs.TBury.perform_async(20 + i) for i in range(2)]
    wait_for(lambda: r.llen(taskjobs.CALLBACKS) == 1, 20, what="the on_complete callback")
    page.goto(f"/tasks/{task.id}")
    # Then it says it is complete, and how many failed: not an error badge alone
    assert page.inner_text("#task-line .task-state") == "complete, 2 failed, 2 errors"
    assert page.inner_text("#task-info td.completed").startswith(
        time.strftime("%Y-%m-%d", time.gmtime()))
    # (each callback's row ends in what became of it: "pushed <when>", or why not)
    complete = page.inner_text("#task-info tr[data-kind=on_complete] td")
    assert re.search(r": pushed \d{4}-\d\d-\d\d", complete), complete
    success = page.inner_text("#task-info tr[data-kind=on_success] td")
    assert ": not pushed: the task completed with failures" in success, success
    assert "price below cost" in page.inner_text("#records")
    shot(page, "task-failures")
    # Its finished jobs' messages
    page.click("#task-line ~ .tabs a[data-state=finished]")
    page.wait_for_selector("#records td.messages .message")
    assert sorted(m.inner_text()[-4:] for m in page.query_selector_all("#records .message")) \
        == ["ok 0", "ok 1", "ok 2"]
    # A record's jid opens Find, which says where the job is now
    page.goto(f"/tasks/{task.id}?state=error")
    page.click(f"#records tr[data-jid='{buried[0]}'] a.jid")
    page.wait_for_selector("#places")
    assert page.locator("#places tr[data-where=dead]").count() == 1
    assert page.locator("#places tr[data-where=task]").count() == 1
    shot(page, "find")
    # When its errors are retried (the question says how many), they run again
    page.goto(f"/tasks/{task.id}")
    page.click("#task-actions button[value=retry_errors]")
    page.wait_for_selector("p.flash")
    assert page.dialogs == ["Retry 2 jobs of this task now (0 waiting for a retry, 2 dead)?"]
    wait_for(lambda: all(r.hget(taskjobs.RUNS, j) == b"2" for j in buried), 20,
             what="the retried jobs to run again")
    # When it is deleted, the browser is back on the list, without it
    page.click("#task-delete button[value=delete]")
    page.wait_for_selector(f"p.flash:has-text('deleted task {task.id}')")
    assert page.dialogs[-1] == (f"Delete task {task.id} and the records of its 7 jobs? Its "
                                "jobs still waiting run outside any task; no callback is pushed.")
    assert page.url.endswith("/tasks")
    assert page.locator(f"#tasks tr[data-task='{task.id}']").count() == 0


def test_each_queue_of_any_name_deletes_its_own_job_and_finds_the_other(page, r):
    # Given queues whose names hold ? # % / .. and the empty name, two jobs each
    for i, name in enumerate(URL_NAMES):
        r.sadd("queues", name)
        r.lpush(f"queue:{name}", payload(f"{i}-a", queue=name), payload(f"{i}-b", queue=name))
    for i, name in enumerate(URL_NAMES):
        # When its page's first row is deleted
        page.goto("/queues")
        page.click(f"{row('queues', 'data-queue', name)} td a")
        page.click(f"#jobs tr[data-jid='{i}-a'] button[value^=delete]")
        page.wait_for_selector("p.flash")
        # Then exactly that job is gone, and the page is still that queue's
        assert page.inner_text("p.flash") == "deleted 1 job"
        assert page.text_content("main h1 code") == ctl_name(name)  # ("" for the empty one)
        assert [json.loads(j)["jid"] for j in r.lrange(f"queue:{name}", 0, -1)] == [f"{i}-b"]
        # and the other job's jid opens Find, whose queue link opens this queue again
        page.click(f"#jobs tr[data-jid='{i}-b'] a.jid")
        page.wait_for_selector("#places")
        page.click("#places tr[data-where=queue] a")
        page.wait_for_selector("#jobs")
        assert page.text_content("main h1 code") == ctl_name(name)  # ("" for the empty one)


# --- red team RT1: each Cron row acts on its own key; a question's number is what is done -----

def test_each_cron_row_disables_its_own_key_whatever_its_name(page, r):
    # Given schedules named by plain text, a URL's characters, a newline, bytes that are not
    # UTF-8, and a hash whose name field differs from its key (a sidekiq-cron rename)
    names = [b"plain", b"a?b", b"x\ny", b"\xff\xfe", b"keyA"]
    for name in names:
        cron_job(r, name, b"plain" if name == b"keyA" else None)
    for _ in names:
        # When the first row still enabled is disabled
        page.goto("/cron")
        before = {n: r.hget(b"cron_job:" + n, "status") for n in names}
        row = page.locator("#cron tbody tr").filter(
            has=page.locator("button[value=disable]")).first
        shown = row.locator("td b").first.inner_text()
        row.locator("button[value=disable]").click()
        page.wait_for_selector("p.flash")
        # Then exactly one key is, one that was enabled (a newline went as CRLF, a name that
        # is not UTF-8 was read as another, a row named by its hash's field hit another key)
        after = {n: r.hget(b"cron_job:" + n, "status") for n in names}
        changed = [n for n in names if after[n] != before[n]]
        assert len(changed) == 1 and before[changed[0]] == b"enabled", (shown, changed)
        assert page.inner_text("p.flash").endswith(
            "disabled: no master pushes it at its ticks until it is enabled again"), shown
    shot(page, "cron-odd-names")
    assert {n: r.hget(b"cron_job:" + n, "status") for n in names} == \
        {n: b"disabled" for n in names}
    assert sorted(r.keys(b"cron_job:*")) == sorted(b"cron_job:" + n for n in names)


def test_delete_all_deletes_the_jobs_its_question_counted(browser, web, r):
    # Given 3 dead jobs (a page of its own: its question is answered after more jobs die)
    r.zadd("dead", {member(f"old{i}"): time.time() - i for i in range(3)})
    context = browser.new_context(base_url=web)
    page = context.new_page()
    asked = []

    def answer(dialog):  # while the operator reads the question, 50 more jobs die
        asked.append(dialog.message)
        r.zadd("dead", {member(f"new{i}"): time.time() for i in range(50)})
        dialog.accept()
    page.on("dialog", answer)
    try:
        page.goto("/dead")
        page.click("#all-jobs button[value=delete]")
        page.wait_for_selector("p.flash")
        assert asked == ["Delete all 3 jobs of Dead?"]
        assert page.inner_text("p.flash") == ("deleted 3 jobs of the 3 counted when asked "
                                              "(the whole set then; any since are left)")
        assert r.zcard("dead") == 50
    finally:
        context.close()


# --- red team RT4: a hidden field's name arrives as it was written --------------------------

def test_a_name_holding_nul_acts_on_itself_not_on_its_look_alike(page, r):
    # Given dead jobs of class y<NUL>z and of its look-alike y<U+FFFD>z (a browser reads a NUL
    # in an attribute as U+FFFD), and two processes named the same two ways
    now = time.time()
    r.zadd("dead", {failed(f"{k}{i}", klass): now - i
                    for k, klass in (("nul", "y\x00z"), ("fffd", "y\ufffdz")) for i in range(2)})
    identities = [b"p\x00q", "p\ufffdq".encode()]
    for identity in identities:
        r.sadd("processes", identity)
        r.hset(identity, mapping={
            "info": json.dumps({"hostname": "h", "pid": 1, "identity": identity.decode(),
                                "queues": ["zz"], "concurrency": 1, "started_at": now}),
            "beat": now, "busy": 0, "quiet": "false", "rss": 0})
    try:
        # When Dead is searched for class y<NUL>z and every match deleted
        page.goto("/dead?class=y%00z")
        page.wait_for_function("() => document.getElementById('match-count').dataset.total")
        page.click("#all-matches button[value=delete]")
        page.wait_for_selector("p.flash")
        # Then the 2 jobs counted are the ones deleted, their look-alikes are left
        assert page.dialogs == ["Delete 2 jobs that match this search?"]
        left = sorted(json.loads(m)["jid"] for m in r.zrange("dead", 0, -1))
        assert left == ["fffd0", "fffd1"]
        # When Stop is pressed on each of the two rows
        for k in range(2):
            page.goto("/busy")
            page.locator("#processes tbody tr").nth(k).locator("button[value=stop]").click()
            page.wait_for_selector("p.flash")
        # Then each process was asked to stop once (not one of them twice)
        assert [r.lrange(i + b"-signals", 0, -1) for i in identities] == [[b"TERM"], [b"TERM"]]
    finally:
        for identity in identities:
            r.srem("processes", identity)
            r.delete(identity, identity + b"-signals")


# --- red team RT4, finding 3: names that look alike read differently, in every place ------------

LOOK_ALIKE = ["critical", "critical\n", "critical ", "new\nline", "new line", "tab\t", "tab ",
              "nul\x00byte", "nul\ufffdbyte", "{n}", "{token}", "\u202eabc",
              "x?\n\nSafe: this only deletes 0 jobs. OK"]


def test_names_that_look_alike_read_differently_and_each_question_names_its_own(page, r):
    # Given queues whose names differ only in blanks or control characters, or hold what a
    # question fills ({n}) or what writes lines into it, two jobs each
    for i, name in enumerate(LOOK_ALIKE):
        r.sadd("queues", name)
        r.lpush(f"queue:{name}", *(payload(f"{i}-{k}", queue=name) for k in range(2)))
    # When the list is shown, Then each reads as queuedctl shows it: no two alike (all three
    # critical read "critical", nul\0byte read as nul\ufffdbyte)
    page.goto("/queues")
    links = page.locator("#queues tbody td a")
    shown = [links.nth(k).inner_text() for k in range(links.count())]
    assert sorted(shown) == sorted(ctl_name(name) for name in LOOK_ALIKE)
    assert ctl_name("critical\n") == '"critical\\n"' and ctl_name("nul\x00byte") == '"nul\\x00byte"'
    shot(page, "queues-look-alike")
    for name in LOOK_ALIKE:
        # When its row's Clear is pressed (and confirmed)
        before = {n: r.llen(f"queue:{n}") for n in LOOK_ALIKE}
        page.goto("/queues")
        row_of = page.locator("#queues tbody tr").filter(
            has=page.get_by_text(ctl_name(name), exact=True))
        row_of.locator("button[value=clear]").click()
        page.wait_for_selector("p.flash")
        # Then the question named it as shown, its own {n} filled and only that, the message
        # named it so too, and exactly that queue was cleared
        assert page.dialogs[-1] == f"Delete all 2 jobs of queue {ctl_name(name)}?"
        assert page.inner_text("p.flash") == (f"cleared {ctl_name(name)}: 2 jobs deleted of the "
                                              f"2 counted when asked (jobs pushed since stay)")
        assert {n: r.llen(f"queue:{n}") for n in LOOK_ALIKE} == {**before, name: 0}
