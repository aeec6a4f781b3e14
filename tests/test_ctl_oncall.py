"""``queuedctl`` on call at 3 a.m. (issue 20), as real subprocesses against a real Redis: listings
off a terminal (one line per row, nothing cut; tsv; --json before or after the command), rich
tables on a terminal, ``errors`` (what is failing), ``find JID`` (where a job is), questions
before bulk actions, ``pause`` of a queue nobody serves, and the near names a typo gets.
(Against real daemons: tests/integration/test_ctl_daemons.py.)"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ctlrun import box_rows, columns, ctl, ctl_env, ctl_json, ok, rows
from harness import ROOT
from test_ctl import IDENTITY, a_process, failed, in_terminal, jid, job

AJ = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
LONG_CLASS = "Billing::Invoices::Reminders::OverdueInvoiceReminderDeliveryJob"


def utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# --- off a terminal: one line per row ------------------------------------------------------------

def many_dead(r, n=850, every=3):
    """``n`` dead jobs of a long class name with long errors; every ``every``-th one a
    TimeoutError whose message has a newline. (the TimeoutError jids)"""
    now = time.time()
    timeouts = []
    for start in range(0, n, 500):
        members = {}
        for i in range(start, min(n, start + 500)):
            timeout = i % every == 0
            members[job(i, klass=LONG_CLASS, args=[i, "x" * 120], retry_count=3,
                        error_class="TimeoutError" if timeout else "CardError",
                        error_message=("read timed out after 30 s talking to https://"
                                       f"payments.example.com/v2/charges\nretry later {i}"
                                       if timeout else "card declined by the issuing bank"),
                        failed_at=now - 100)] = now - i
            if timeout:
                timeouts.append(jid(i))
        r.zadd("dead", members)
    return timeouts


def test_a_pipe_gets_one_line_per_row_and_grep_counts_every_match(r, redis_url):
    # Given 850 dead jobs whose class, arguments and errors are far wider than 80 columns
    timeouts = many_dead(r)
    # When the listing goes through a pipe, as at 3 a.m. (80 columns, no terminal)
    env = {**ctl_env(), "COLUMNS": "80"}
    ctl_cmd = f"{sys.executable} -m queued.admin.ctl --redis {redis_url} jobs dead --limit 0"
    count = subprocess.run(["sh", "-c", f"{ctl_cmd} | grep -c TimeoutError"],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    lines = subprocess.run(["sh", "-c", f"{ctl_cmd} | wc -l"], capture_output=True,
                           text=True, env=env, cwd=ROOT, timeout=120)
    # Then grep counts every match and wc every row (and the header)
    assert (count.stdout.strip(), count.stderr) == (str(len(timeouts)), "")
    assert lines.stdout.strip() == "851"
    # And every cell is whole: the class, the arguments, the error (its newline a space)
    listing = ok("jobs", "dead", "--limit", "0", url=redis_url, env={"COLUMNS": "80"})
    assert columns(listing) == ["Died", "JID", "Class", "Queue", "Args", "Error"]
    table = rows(listing)
    assert len(table) == 850 and {row[2] for row in table} == {LONG_CLASS}
    first = table[0]
    assert first[1:] == [jid(0), LONG_CLASS, "default", json.dumps([0, "x" * 120]).replace(
        " ", ""), "TimeoutError: read timed out after 30 s talking to "
                  "https://payments.example.com/v2/charges retry later 0"]


def test_tsv_for_scripts_keeps_every_character(r, redis_url):
    due = time.time() + 90
    r.zadd("retry", {failed(1, message="line one\n\tline two \\ end"): due})
    text = ok("jobs", "retry", "--format", "tsv", url=redis_url)
    header, row = text.splitlines()
    assert header.split("\t") == ["Next retry", "JID", "Class", "Queue", "Args", "Retries",
                                  "Error"]
    cells = row.split("\t")
    assert cells[0] == utc(due)
    assert cells[1:6] == [jid(1), "Billing::InvoiceJob", "default", '[1,"bob"]', "3"]
    assert cells[6] == "RuntimeError: line one\\n\\tline two \\\\ end 1"


def test_json_and_format_go_before_or_after_the_command(r, full_dead, redis_url):
    after = ok("jobs", "dead", "--json", url=redis_url)
    before = ok("--json", "jobs", "dead", url=redis_url)
    assert json.loads(after) == json.loads(before) and json.loads(after)["matched"] == 3
    assert ok("--format", "tsv", "queues", url=redis_url) == \
        ok("queues", "--format", "tsv", url=redis_url) == "Queue\tSize\tLatency\tPaused\n"
    # (--format json is --json; --format table draws a table even into a pipe)
    assert json.loads(ok("errors", "dead", "--format", "json", url=redis_url))[0]["count"] == 3
    drawn = ok("jobs", "dead", "--format", "table", url=redis_url)
    assert drawn.startswith("dead ") and drawn.splitlines()[1].startswith("┏")


@pytest.fixture
def full_dead(r):
    now = time.time()
    r.zadd("dead", {failed(40 + i): now - 3600 * (i + 1) for i in range(3)})
    return r


def test_tables_stay_rich_on_a_terminal(r, full_dead, redis_url):
    status, drawn = in_terminal(["jobs", "dead"], b"", redis_url)
    assert status == 0 and "┏" in drawn and "3 of 3 in dead" in drawn
    assert [row[1] for row in box_rows(drawn)] == [jid(40), jid(41), jid(42)]


# --- errors: what is failing ---------------------------------------------------------------------

def failure(i, klass, error_class, message, at, **extra) -> str:
    return job(i, klass=klass, error_class=error_class, error_message=message,
               retry_count=2, failed_at=at - 600, retried_at=at, **extra)


def test_errors_groups_by_class_and_error_largest_first(r, redis_url):
    # Given a retry set: 5 InvoiceJob timeouts, 3 ActiveJob ReportJob KeyErrors (Rails's
    # wrapper), 2 InvoiceJob card errors, 1 member that is not JSON
    now = time.time()
    members = {}
    for i in range(5):
        members[failure(i, "Billing::InvoiceJob", "Timeout::Error", f"timed out {i}",
                        now - 100 + i)] = now + 60
    for i in range(5, 8):
        members[failure(i, AJ, "KeyError", f"key {i}", now - 50 - i, wrapped="ReportJob")] = \
            now + 60
    for i in range(8, 10):
        members[failure(i, "Billing::InvoiceJob", "CardError", f"declined {i}",
                        now - 3000 + i)] = now + 60
    members["not json"] = now + 60
    r.zadd("retry", members)
    # When queuedctl errors reads it
    doc = ctl_json("errors", "retry", url=redis_url)
    # Then the groups, largest first, each with its latest message and time
    assert doc == [
        {"class": "Billing::InvoiceJob", "error_class": "Timeout::Error", "count": 5,
         "latest_message": "timed out 4", "latest_at": pytest.approx(now - 96)},
        {"class": "ReportJob", "error_class": "KeyError", "count": 3,
         "latest_message": "key 5", "latest_at": pytest.approx(now - 55)},
        {"class": "Billing::InvoiceJob", "error_class": "CardError", "count": 2,
         "latest_message": "declined 9", "latest_at": pytest.approx(now - 2991)},
        {"class": "?", "error_class": "", "count": 1, "latest_message": "",
         "latest_at": None}]
    listing = ok("errors", "retry", url=redis_url)
    assert columns(listing) == ["Count", "Class", "Error", "Latest message", "Latest"]
    assert [row[:4] for row in rows(listing)] == [
        ["5", "Billing::InvoiceJob", "Timeout::Error", "timed out 4"],
        ["3", "ReportJob", "KeyError", "key 5"],
        ["2", "Billing::InvoiceJob", "CardError", "declined 9"],
        ["1", "?", "-", ""]]
    assert rows(listing)[0][4].endswith("m ago")
    status, drawn = in_terminal(["errors", "retry"], b"", redis_url)
    assert status == 0 and "4 groups, 11 jobs in retry" in drawn


def test_errors_of_dead_use_the_death_time_without_failure_times(r, redis_url):
    r.zadd("dead", {json.dumps({"class": "X", "args": [], "jid": jid(1),
                                "error_class": "E", "error_message": "m"}): 1795000000.5})
    assert ctl_json("errors", "dead", url=redis_url) == [
        {"class": "X", "error_class": "E", "count": 1, "latest_message": "m",
         "latest_at": 1795000000.5}]
    assert ctl_json("errors", "retry", url=redis_url) == []
    bad = ctl("errors", "scheduled", url=redis_url)
    assert bad.returncode == 2 and "not a set of failed jobs: give retry or dead" in bad.stderr


# --- find: where a job is ------------------------------------------------------------------------

def test_find_in_a_queue_says_its_position(r, redis_url):
    # Given 30,000 jobs in queue default, jid(7) among them (pushed 8th, so 8th to run: at
    # the far end from the head, three chunks of the search away), and a job in another queue
    # whose arguments mention jid(7)
    r.sadd("queues", "default", "low")
    for start in range(0, 30_000, 5000):
        r.lpush("queue:default", *[job(i) for i in range(start, start + 5000)])
    r.lpush("queue:low", job(99, "low", args=[jid(7)]))
    # When queuedctl looks for it
    doc = ctl_json("find", jid(7), url=redis_url)
    # Then it is found once, in default, 8th to run of 30,000
    (place,) = doc["places"]
    assert (doc["found"], place["where"], place["queue"], place["position"],
            place["length"]) == (True, "queue", "default", 8, 30_000)
    assert place["job"]["jid"] == jid(7) and place["job"]["args"] == [7, "bob"]
    (row,) = rows(ok("find", jid(7), url=redis_url))
    assert row[0] == "queue" and row[2:] == ["HardJob", "default",
                                            "position 8 of 30,000 (1 runs next)"]


def test_find_in_the_sets_running_fetched_and_in_a_task(r, redis_url):
    now = time.time()
    r.zadd("schedule", {job(1): now + 300})
    r.zadd("retry", {failed(2): now + 120})
    r.zadd("dead", {failed(3): now - 60})
    # running: a process's heartbeat names it (queued writes its worker and pid)
    a_process(r)
    r.hset(f"{IDENTITY}:workers", "3hx", json.dumps(
        {"queue": "default", "payload": json.loads(job(4)), "run_at": int(now - 12),
         "worker": "w3", "pid": 5001}))
    # fetched: in a worker's reserved set (queue NUL token NUL payload), not running yet
    r.hset("queued:masters", "web-9:77:ab", json.dumps({"slots": 2, "queues": ["default"]}))
    r.zadd("queued:reserved:web-9:77:ab:1", {b"default\0tok\0" + job(5).encode(): now})
    docs = {i: ctl_json("find", jid(i), url=redis_url) for i in range(1, 6)}
    where = {i: [(p["where"], p.get("at")) for p in d["places"]] for i, d in docs.items()}
    assert where == {1: [("schedule", pytest.approx(now + 300))],
                     2: [("retry", pytest.approx(now + 120))],
                     3: [("dead", pytest.approx(now - 60))],
                     4: [("running", int(now - 12))],
                     5: [("reserved", None)]}
    running = docs[4]["places"][0]
    assert (running["identity"], running["pid"], running["worker"]) == (IDENTITY, 5001, "w3")
    fetched = docs[5]["places"][0]
    assert (fetched["identity"], fetched["worker"], fetched["queue"]) == (
        "web-9:77:ab", "w1", "default")
    lines = {i: rows(ok("find", jid(i), url=redis_url))[0] for i in range(1, 6)}
    assert lines[2][0] == "retry" and lines[2][1].startswith("retries in ")
    assert lines[2][4] == "RuntimeError: card declined 2 (retry_count 3)"
    assert lines[4][4] == f"on {IDENTITY} pid 5001 worker w3"
    assert lines[5][:2] == ["fetched", "-"]


def test_find_a_finished_job_by_its_task_and_nothing_is_exit_1(producer, r, redis_url):
    from test_ctl_tasks import a_task, move
    task, jids = a_task(r)
    move(r, task, jids[0], "finished")  # (done: it is in no queue or set any more)
    r.delete("queue:default")
    doc = ctl_json("find", jids[0], url=redis_url)
    (place,) = doc["places"]
    assert (place["where"], place["task_id"], place["task_description"],
            place["record"]["status"]) == ("task", task.id, "promo 42", "finished")
    (row,) = rows(ok("find", jids[0], url=redis_url))
    assert row == ["task", "-", "Signup", "default", f"task {task.id} (promo 42): finished"]
    absent = ctl("find", "f" * 24, url=redis_url)
    assert (absent.returncode, absent.stdout) == (1, "")
    assert absent.stderr.startswith(f"queuedctl: no job {'f' * 24} on ")
    assert ctl_json("find", "f" * 24, url=redis_url, status=1) == {
        "jid": "f" * 24, "found": False, "places": []}


def test_find_and_jobs_show_the_backtrace(r, redis_url):
    import base64
    import zlib
    lines = ["app/billing.py:42:in `charge'", "app/jobs.py:7:in `perform'"]
    blob = base64.b64encode(zlib.compress(json.dumps(lines).encode())).decode() + "\n"
    r.zadd("dead", {failed(1, error_backtrace=blob): time.time()})
    said = ok("find", jid(1), "--backtrace", url=redis_url)
    assert said.endswith("backtrace (dead), innermost first:\n"
                         "  app/billing.py:42:in `charge'\n  app/jobs.py:7:in `perform'\n")
    assert ctl_json("find", jid(1), "--backtrace", url=redis_url)["places"][0][
        "backtrace"] == lines
    assert ctl_json("jobs", "dead", "--backtrace", url=redis_url)["jobs"][0][
        "backtrace"] == lines
    assert ok("jobs", "dead", "--backtrace", url=redis_url).endswith(
        f"backtrace of {jid(1)} (Billing::InvoiceJob), innermost first:\n"
        "  app/billing.py:42:in `charge'\n  app/jobs.py:7:in `perform'\n")


# --- dangerous actions ask -----------------------------------------------------------------------

def dead_mix(r, n=400, matching=300):
    now = time.time()
    r.zadd("dead", {failed(i, klass="A" if i < matching else "B"): now - i for i in range(n)})


@pytest.mark.parametrize("action, set_name, question", [
    ("delete", "dead", "delete 300 jobs from dead? [y/N]"),
    ("retry", "dead", "retry 300 jobs from dead (enqueue them now)? [y/N]"),
    ("kill", "retry", "kill 300 jobs from retry (move them to dead)? [y/N]"),
])
def test_a_filtered_bulk_action_asks_with_the_count(r, redis_url, action, set_name, question):
    # Given 400 jobs, 300 of class A
    dead_mix(r)
    if set_name == "retry":
        r.rename("dead", "retry")
    before = r.zcard(set_name)
    # When the action on every A is answered no on a terminal: nothing is done
    status, said = in_terminal([action, set_name, "--class", "A", "--all"], b"n\n", redis_url)
    assert status == 1 and question in said and "not confirmed; nothing was done" in said
    assert r.zcard(set_name) == before
    # Off a terminal without --yes it refuses at once: exit 2, one line, nothing done
    refused = ctl(action, set_name, "--class", "A", "--all", url=redis_url)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (f"queuedctl: {action} --all on {set_name} needs --yes when "
                              f"stdin is not a terminal (nothing was done)\n")
    assert r.zcard(set_name) == before
    # When answered yes: the 300 are acted on
    status, said = in_terminal([action, set_name, "--class", "A", "--all"], b"y\n", redis_url)
    assert status == 0 and "300 jobs" in said and r.zcard(set_name) == before - 300


def test_yes_skips_the_question_and_an_unfiltered_delete_asks_with_the_size(r, redis_url):
    dead_mix(r)
    status, said = in_terminal(["delete", "dead", "--all"], b"n\n", redis_url)
    assert status == 1 and "delete 400 jobs from dead? [y/N]" in said
    assert ok("delete", "dead", "--class", "B", "--all", "--yes", url=redis_url) == (
        "100 jobs deleted from dead\n")
    # JIDs named one by one are not asked about
    assert ok("retry", "dead", jid(1), url=redis_url) == \
        "1 job retried (enqueued now) from dead\n"


def test_pause_of_a_queue_that_does_not_exist_or_nobody_serves(r, redis_url):
    # Given queues default and reports with jobs; a live process serving default only
    r.sadd("queues", "default", "reports")
    a_process(r, queues=("default",))
    # A typo: nothing paused, exit 1, the near name
    typo = ctl("pause", "defualt", url=redis_url)
    assert (typo.returncode, typo.stdout) == (1, "")
    assert typo.stderr == ("queuedctl: no queue named defualt: it holds no jobs and no live "
                           "process serves it; nothing paused (did you mean default?) "
                           "(--force pauses it anyway)\n")
    assert r.smembers("paused") == set()
    # A queue nobody serves: paused, with a warning, exit 1
    unserved = ctl("pause", "reports", url=redis_url)
    assert unserved.returncode == 1
    assert unserved.stdout.startswith("paused queue reports")
    assert unserved.stderr == ("queuedctl: no live process serves queue reports (queuedctl "
                               "processes lists what each serves); it is paused for whoever "
                               "starts serving it\n")
    assert r.smembers("paused") == {b"reports"}
    # A served queue: exit 0; --force pauses any name, exit 0
    assert ok("pause", "default", url=redis_url).startswith("paused queue default")
    assert ok("pause", "later", "--force", url=redis_url).startswith("paused queue later")
    assert r.smembers("paused") == {b"reports", b"default", b"later"}


def test_a_set_name_that_is_a_queue_suggests_it(redis_url):
    for text, hint in (("default", "did you mean queue:default?"),
                       ("deadd", "did you mean dead?")):
        proc = ctl("jobs", text, url=redis_url)
        assert proc.returncode == 2 and hint in proc.stderr, proc.stderr


def test_help_lists_the_on_call_commands():
    main = ok("--help")
    assert "    errors" in main and "    find" in main
    assert "--format {table,plain,tsv,json}" in ok("find", "--help")
