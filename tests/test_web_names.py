"""Every name the dashboard shows reads as ``queuedctl`` shows it, on every page (F4 #1), and a
search box takes it back as shown (F4 #2): two names that differ only in what a browser does not
show (a blank at an end, a tab for a space, two spaces, a newline, a NUL, a zero-width space, a
bidi override, a no-break space, a variation selector, a combining accent for a precomposed
letter, a C1 control) read differently, the empty name reads ``""``, a name is still text (a
script stays text), and the text shown, typed in a search box, finds exactly that name's jobs.
Headless Chromium on ``queuedctl web``, a real redis-server; each cell's text is compared whole
with the text queuedctl shows, written out here."""
from __future__ import annotations

import json
import time

import pytest

import queued
from queued.admin.ctltext import name as ctl_name
from queued.admin.metrics import minute_key
import test_web_browser
from test_web_browser import failed, payload, shot
from test_web_exact import cron_job

#: test_web_browser's fixtures: one headless Chromium and one ``queuedctl web`` for the module,
#: a fresh page per test that must log no console error.
browser, web, page = test_web_browser.browser, test_web_browser.web, test_web_browser.page

#: A name -> the exact text shown for it (as queuedctl shows it: ctltext.name).
SHOWN = {
    "plain": "plain",
    "plain ": '"plain "',
    " plain": '" plain"',
    "tab\tx": r'"tab\tx"',
    "tab x": "tab x",
    "two  sp": r'"two \x20sp"',
    "new\nline": r'"new\nline"',
    "nul\x00x": r'"nul\x00x"',
    "nul\ufffdx": "nul\ufffdx",
    "zw\u200bsp": r'"zw\u200bsp"',
    "zwsp": "zwsp",
    "rlo\u202ex": r'"rlo\u202ex"',
    "nb\u00a0sp": r'"nb\u00a0sp"',
    "nb sp": "nb sp",
    "vs\ufe0f": r'"vs\ufe0f"',
    "caf\u00e9": "caf\u00e9",
    "cafe\u0301": r'"cafe\u0301"',
    "c1\u0085": r'"c1\u0085"',
    "back\\x00": "back\\x00",
    '"q"': r'"\"q\""',
    "<script>window.__pwned=1</script>": "<script>window.__pwned=1</script>",
    "": '""',
}
NAMES = list(SHOWN)


@pytest.fixture(autouse=True)
def quick(request):
    """A selector that is not there fails in 10 s, not 30."""
    if "page" in request.fixturenames:
        request.getfixturevalue("page").set_default_timeout(10_000)


def never_ran(page) -> bool:
    return page.evaluate("typeof window.__pwned") == "undefined"



def rows_by_pid(page, table: str) -> dict:
    """The rows of a Busy page table, by the text of their pid cell (each pid once)."""
    rows = page.locator(f"{table} tbody tr")
    out = {}
    for k in range(rows.count()):
        row = rows.nth(k)
        out[row.locator(".pid").inner_text()] = row
    assert len(out) == rows.count()
    return out

def test_the_names_read_as_queuedctl_shows_them():
    # (the table above is what queuedctl writes too: the same rule in both)
    assert {name: ctl_name(name) for name in NAMES} == SHOWN
    assert len(set(SHOWN.values())) == len(SHOWN)


def test_queue_names_on_the_queues_page_and_each_queue_s_own(page, r):
    # Given one queue per name, holding one job whose class is that name too
    for i, name in enumerate(NAMES):
        r.sadd("queues", name)
        r.lpush(f"queue:{name}", payload(f"j{i}", klass=name, queue=name))
    # When the list is shown, Then each queue reads as queuedctl shows it, no two alike
    page.goto("/queues?size=100")
    links = page.locator("#queues tbody td a")
    listed = {links.nth(k).inner_text(): links.nth(k).get_attribute("href")
              for k in range(links.count())}
    assert sorted(listed) == sorted(SHOWN.values())
    shot(page, "queues-names")
    for i, name in enumerate(NAMES):
        # and its own page names it so in its heading and in its job's class
        page.goto(listed[SHOWN[name]])
        assert page.inner_text("main h1 code") == SHOWN[name]
        assert page.inner_text("#jobs tbody td.jid") == f"j{i}"
        assert page.inner_text("#jobs tbody td.klass") == SHOWN[name]
        assert never_ran(page)


@pytest.mark.parametrize("slug,zset", [("dead", "dead"), ("retries", "retry"),
                                       ("scheduled", "schedule")])
def test_job_set_rows_and_job_pages(page, r, slug, zset):
    # Given one job per name, whose jid, class, queue, error class and error message are it
    now = time.time()
    for i, name in enumerate(NAMES):
        score = now - i if zset == "dead" else now + 3600 + i  # (row i is name i)
        job = (failed(name, klass=name, queue=name, error=(name, name)) if zset != "schedule"
               else payload(name, klass=name, queue=name))
        r.zadd(zset, {job: score})
    # When the set is listed, Then each cell reads as queuedctl shows the name
    page.goto(f"/{slug}?size=100")
    rows = page.locator("#jobs tbody tr")
    assert rows.count() == len(NAMES)
    hrefs = []
    for i, name in enumerate(NAMES):
        row, shown = rows.nth(i), SHOWN[name]
        cells = [row.locator(f"td.{c}").inner_text() for c in ("jid", "klass", "queue")]
        assert cells == [shown, shown, shown], name
        if zset != "schedule":
            assert row.locator("td.error").inner_text() == (f"{shown}: {shown}" if name
                                                           else ""), name
        hrefs.append(row.locator("td.jid a").get_attribute("href"))
    assert never_ran(page)
    shot(page, f"{slug}-names")
    if zset != "dead":
        return
    for name, href in zip(NAMES, hrefs):
        # and each job's page names it so: heading, queue, error
        page.goto(href)
        shown = SHOWN[name]
        assert page.inner_text("main h1 .klass") == shown
        assert page.inner_text("main h1 code") == shown
        assert page.inner_text("#job td.queue") == shown
        if name:
            assert page.inner_text("#job td.error") == f"{shown}: {shown}"
        assert never_ran(page)


def test_processes_and_running_jobs_on_busy(page, r):
    # Given one live process per name (its identity, tag, host, version and a queue are the
    # name), each running one job whose worker, jid, class and queue are the name
    now = time.time()
    for i, name in enumerate(NAMES):
        r.sadd("processes", name)
        r.hset(name, mapping={
            "info": json.dumps({"hostname": name, "pid": 1000 + i, "identity": name,
                                "tag": name, "version": name, "queues": [name, "plain"],
                                "concurrency": 1, "started_at": now}),
            "beat": now, "busy": 1, "quiet": "false", "rss": 0})
        r.hset(f"{name}:workers", name, json.dumps({
            "queue": name, "run_at": now,
            "payload": json.loads(payload(name, klass=name, queue=name))}))
    # When Busy is shown
    page.goto("/busy")
    shot(page, "busy-names")
    by_pid, jobs_by_pid = rows_by_pid(page, "#processes"), rows_by_pid(page, "#running")
    assert len(by_pid) == len(jobs_by_pid) == len(NAMES)
    for i, name in enumerate(NAMES):
        shown, row = SHOWN[name], by_pid[str(1000 + i)]
        # Then each process's cells read as queuedctl shows its names
        assert row.locator(".identity").inner_text() == shown
        assert [t.inner_text() for t in row.locator(".tag").all()] == ([shown] if name else [])
        assert row.locator(".host").inner_text() == shown
        assert row.locator(".version").inner_text() == shown
        assert [q.inner_text() for q in row.locator("td.queues .queue").all()] == \
            [shown, "plain"]
        # and so do its running job's
        job = jobs_by_pid[str(1000 + i)]
        assert [job.locator(c).inner_text() for c in
                (".identity", ".worker", "td.jid", "td.queue", "td.klass")] == [shown] * 5
    assert never_ran(page)


def test_periodic_jobs_on_cron(page, r):
    # Given one periodic job per name: its key, class and queue are the name
    for i, name in enumerate(NAMES):
        raw = name.encode()
        cron_job(r, raw)
        r.hset(b"cron_job:" + raw, mapping={
            "klass": name, "description": f"d{i}",
            "message": json.dumps({"class": name, "queue": name, "args": []})})
    page.goto("/cron")
    rows = page.locator("#cron tbody tr")
    assert rows.count() == len(NAMES)
    seen = {}
    for k in range(rows.count()):
        row = rows.nth(k)
        seen[row.locator(".description").inner_text()] = [
            row.locator(c).inner_text() for c in ("td.name b", "td.klass", "td.queue")]
    # Then each reads as queuedctl shows it
    assert seen == {f"d{i}": [SHOWN[name]] * 3 for i, name in enumerate(NAMES)}
    assert never_ran(page)


def test_job_classes_on_metrics_and_each_class_s_page(page, r):
    # Given a minute of metrics for one class per name
    key = minute_key(time.time())
    for name in NAMES[:-1]:  # (a class named "" never runs: no metrics)
        r.hincrby(key, f"{name}|p", 2)
        r.hincrby(key, f"{name}|ms", 10)
    page.goto("/job-metrics")
    links = page.locator("#classes tbody td.klass a")
    listed = {links.nth(k).inner_text(): links.nth(k).get_attribute("href")
              for k in range(links.count())}
    assert sorted(listed) == sorted(SHOWN[name] for name in NAMES[:-1])
    for name in NAMES[:-1]:
        page.goto(listed[SHOWN[name]])
        assert page.inner_text("main h1 .klass") == SHOWN[name]
        assert never_ran(page)


def test_task_descriptions_and_their_jobs_classes(page, r, producer):
    # Given one task per name (its description) holding one job whose class is the name
    tasks = {}
    for name in NAMES[:-1]:  # (a task without a description is shown by its id)
        task = queued.Task(name)
        with task:
            producer.push({"class": name or "x", "args": []})
        tasks[task.id] = name
    page.goto("/tasks?size=100")
    rows = page.locator("#tasks tbody tr")
    seen = {}
    for k in range(rows.count()):
        row = rows.nth(k)
        seen[row.locator("code").inner_text()] = row.locator("td a").first.inner_text()
    assert seen == {tid: SHOWN[name] for tid, name in tasks.items()}
    for tid, name in tasks.items():
        page.goto(f"/tasks/{tid}?state=enqueued")
        assert page.inner_text("main h1 .description") == SHOWN[name]
        assert page.inner_text("#records tbody td.klass") == SHOWN[name]
        assert never_ran(page)


def test_find_names_a_job_s_jid_class_and_queue(page, r):
    # Given one dead job per name
    now = time.time()
    for i, name in enumerate(NAMES):
        r.zadd("dead", {failed(name, klass=name, queue=name, error=(name, name)): now - i})
    for name in NAMES[:-1]:  # (the empty jid is no search)
        # When its jid is looked for as the page shows it (a NUL, a blank at an end, typed)
        page.goto("/find")
        page.fill("#find-form input[name=jid]", SHOWN[name])
        page.click("#find-form button")
        page.wait_for_selector("#places")
        # Then that job is found, and named as queuedctl shows it
        shown = SHOWN[name]
        assert page.input_value("#find-form input[name=jid]") == shown
        assert page.inner_text("main h1 code") == shown
        assert page.inner_text("#job-summary td.klass") == shown
        assert page.inner_text("#job-summary td.error") == f"{shown}: {shown}"
        assert page.inner_text("#places tr[data-where=dead] td .error") == f"{shown}: {shown}"
        assert never_ran(page)


# --- F4 #2: what the page shows, typed in a search box, finds exactly that -----------------------

#: Classes a browser would read alike: a NUL (sent back as U+FFFD), U+FFFD itself, the text
#: \x00 typed with a backslash, a blank at the end.
CLASSES = ["y\x00z", "y\ufffdz", "y\\x00z", "y z", "y z "]


def search(page, field: str, text: str) -> list[str]:
    page.fill(f"#search input[name={field}]", text)
    page.click("#search button[type=submit]")
    page.wait_for_selector("#search-count")
    return sorted(row.get_attribute("data-jid") for row in page.locator("#jobs tbody tr").all()
                  if row.get_attribute("data-jid"))


def test_a_class_searched_as_the_page_shows_it_finds_exactly_its_jobs(page, r):
    # Given two dead jobs of each class
    now = time.time()
    r.zadd("dead", {failed(f"{k}-{i}", klass=klass): now - 2 * k - i
                    for k, klass in enumerate(CLASSES) for i in range(2)})
    page.goto("/dead")
    shown = [page.inner_text(f"#jobs tbody tr[data-jid='{k}-0'] td.klass")
             for k in range(len(CLASSES))]
    assert shown == [r'"y\x00z"', "y\ufffdz", r"y\x00z", "y z", '"y z "']
    for k, text in enumerate(shown):
        # When the class as shown is typed and searched
        page.goto("/dead")
        # Then exactly that class's jobs are found, the box still holds what was typed,
        # and searching again finds the same
        assert search(page, "class", text) == [f"{k}-0", f"{k}-1"], text
        assert page.input_value("#search input[name=class]") == text
        assert search(page, "class", page.input_value("#search input[name=class]")) == \
            [f"{k}-0", f"{k}-1"], text
    # When the search comes in a link holding a NUL (which no box can type)
    page.goto("/dead?class=y%00z")
    # Then the box shows it as the page shows the class, and searching again finds the same
    assert page.input_value("#search input[name=class]") == r'"y\x00z"'
    assert search(page, "class", r'"y\x00z"') == ["0-0", "0-1"]
    # and every match of it is deleted, its look-alikes left
    page.click("#all-matches button[value=delete]")
    page.wait_for_selector("p.flash")
    assert page.dialogs == ["Delete 2 jobs that match this search?"]
    left = sorted(json.loads(m)["jid"] for m in r.zrange("dead", 0, -1))
    assert left == sorted(f"{k}-{i}" for k in range(1, len(CLASSES)) for i in range(2))


def test_a_queue_an_error_and_an_argument_searched_as_shown(page, r):
    # Given dead jobs whose queue holds a tab or a space, whose error message ends in a NUL
    # or in U+FFFD, whose argument holds a NUL or U+FFFD
    now = time.time()
    r.zadd("dead", {
        failed("tab", queue="q\tx"): now, failed("space", queue="q x"): now - 1,
        failed("nul-error", error=("E", "boom\x00")): now - 2,
        failed("fffd-error", error=("E", "boom\ufffd")): now - 3,
        failed("nul-arg", args=["a\x00b"]): now - 4,
        failed("fffd-arg", args=["a\ufffdb"]): now - 5})
    page.goto("/dead")
    assert page.inner_text("#jobs tr[data-jid=tab] td.queue") == r'"q\tx"'
    assert page.inner_text("#jobs tr[data-jid=nul-error] td.error") == r'E: "boom\x00"'
    assert page.inner_text("#jobs tr[data-jid=nul-arg] td.args") == r'["a\u0000b"]'
    # When each is searched as shown, Then exactly its job is found
    assert search(page, "queue", r'"q\tx"') == ["tab"]
    assert search(page, "queue", "q x") == ["space"]
    page.goto("/dead")
    assert search(page, "error", r'"boom\x00"') == ["nul-error"]
    page.goto("/dead")
    assert search(page, "arg", r"a\u0000b") == ["nul-arg"]
    assert search(page, "arg", "a\ufffdb") == ["fffd-arg"]
    # and a link holding a raw NUL in the argument search finds the same, its box shows it
    # escaped as the arguments show it
    page.goto("/dead?arg=a%00b")
    assert page.input_value("#search input[name=arg]") == r"a\u0000b"
    assert sorted(row.get_attribute("data-jid") for row in
                  page.locator("#jobs tbody tr").all()) == ["nul-arg"]


def test_a_queue_name_searched_as_shown_on_the_queues_page(page, r):
    for name in NAMES:
        r.sadd("queues", name)
        r.lpush(f"queue:{name}", payload("j", queue=name))
    for name in ("nul\x00x", "plain ", "zw\u200bsp", "new\nline"):
        page.goto("/queues?size=100")
        page.fill("form.search input[name=q]", SHOWN[name])
        page.click("form.search button")
        page.wait_for_selector("#queues")
        links = [a.inner_text() for a in page.locator("#queues tbody td a").all()]
        assert links == [SHOWN[name]], name
        assert page.input_value("form.search input[name=q]") == SHOWN[name]


# --- F4 #3: a retry leaves a job whose payload names no queue where it is -----------------------

LEFT = 'its payload names no queue ("queue" is "", null or not a string)'


def dead_jids(r) -> list[str]:
    return sorted(json.loads(m)["jid"] for m in r.zrange("dead", 0, -1))


def test_retry_on_the_dashboard_leaves_a_job_that_names_no_queue_and_says_so(page, r):
    # Given a dead job whose "queue" is "" (it used to be retried into "default") and another
    now = time.time()
    r.zadd("dead", {failed("empty", queue=""): now, failed("ok"): now - 1})
    page.goto("/dead")
    assert page.inner_text("#jobs tr[data-jid=empty] td.queue") == '""'
    # When its row is ticked and retried, Then it stays in Dead, and the page says why
    # (each click waits for the page it loads: a flash of the page before is no answer)
    page.check("#jobs tr[data-jid=empty] input[type=checkbox]")
    with page.expect_navigation():
        page.click("#selected button[value=retry]")
    page.wait_for_selector("p.flash")
    assert page.inner_text("p.flash") == f"retried 0 jobs; 1 left in Dead: {LEFT}"
    assert dead_jids(r) == ["empty", "ok"] and r.llen("queue:default") == 0
    # When its own page's Retry now is pressed, the same
    with page.expect_navigation():
        page.click("#jobs tr[data-jid=empty] td.jid a")
    with page.expect_navigation():
        page.click("form button[value=retry]")
    page.wait_for_selector("p.flash")
    assert page.inner_text("p.flash") == f"retried 0 jobs; 1 left in Dead: {LEFT}"
    # When every job of Dead is retried, Then the other one is, this one stays, said
    with page.expect_navigation():
        page.click("#all-jobs button[value=retry]")
    page.wait_for_selector("p.flash")
    assert page.dialogs[-1] == "Retry all 2 jobs of Dead now?"
    assert page.inner_text("p.flash") == (
        "retried 1 job of the 2 counted when asked (the whole set then; any since are left); "
        f"1 left in Dead: {LEFT}")
    assert dead_jids(r) == ["empty"]
    assert [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)] == ["ok"]
    assert not r.exists("queue:") and r.smembers("queues") == {b"default"}
