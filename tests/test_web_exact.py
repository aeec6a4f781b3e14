"""The dashboard acts on exactly what it shows and asks (red team RT1, findings 1, 3, 6, 7, 8, 9,
10, 12, 14): a question's number bounds what its action does (the count is taken on a copy the
action then walks), a task's "Retry its errors now" retries each job once and asks with what
can be retried, a process named ``*`` is one process, every Cron row acts on its own key
whatever its name (a newline in a hidden field survives the browser), odd query parameters
are never a 500, one odd job never stops a bulk action. Over HTTP (Starlette's TestClient, a
real redis-server); in headless Chromium: test_web_browser.py."""
from __future__ import annotations

import base64
import html
import json
import re
import threading
import time

import pytest
from starlette.testclient import TestClient

import queued
from queued.admin.api import Admin
from queued.admin.snapshot import Gone
from queued.task import Task

from ctlrun import ctl, ctl_json
from test_admin_exact import ODD, member, php_json
from test_web import flash_of, rows_by
import test_web_oncall
from test_web_oncall import token_of


#: the dashboard of test_web_oncall.py (a fixed secret; the page's token sent as app.js does)
client = test_web_oncall.client


class Job(queued.Job):
    def perform(self, n):
        pass


def post(client, path: str, **form):
    page = client.get(path).text
    return client.post(path, data={"csrf_token": token_of(page), **form})


def count_urls(page: str) -> dict[str, str]:
    """{a button's action: the URL it counts its jobs with when clicked}."""
    return {action: html.unescape(url) for action, url in re.findall(
        r'<button type="submit" name="action" value="(\w+)"[^>]*data-count="([^"]*)"', page)}


# --- 7. a question's number bounds what is done --------------------------------------------------

def test_delete_all_deletes_at_most_the_jobs_its_question_counted(client, r):
    # Given 3 dead jobs
    r.zadd("dead", {member(f"old{i}"): i for i in range(3)})
    # When the page's "Delete all" counts them for its question (at the click)...
    url = count_urls(client.get("/dead").text)["delete"]
    asked = client.get(url).json()
    assert (asked["count"], asked["size"]) == (3, 3) and asked["token"]
    # ... 200 more die while the question is read, and the answer is yes
    r.zadd("dead", {member(f"new{i}"): 10 + i for i in range(200)})
    done = post(client, "/dead", action="delete", scope="all", snapshot=asked["token"],
                counted=str(asked["count"]))
    # Then the 3 counted are deleted, and only they
    assert flash_of(done.text) == ("deleted 3 jobs of the 3 counted when asked (the whole "
                                   "set then; any since are left)")
    assert r.zcard("dead") == 200 and not [m for m in r.zrange("dead", 0, -1) if b"old" in m]
    # And the same answer sent again does nothing (a question is answered once)
    again = post(client, "/dead", action="delete", scope="all", snapshot=asked["token"],
                 counted="3")
    assert flash_of(again.text).startswith("nothing done: the jobs counted for that question "
                                           "are gone")
    assert r.zcard("dead") == 200


def test_a_count_that_keeps_a_copy_needs_the_page_s_token_and_copies_nothing_without_it(
        producer, client, r):
    # Given 3 dead jobs, a queue of 2 and a task with errors: each of their bulk buttons
    # counts on a copy kept for the answer
    r.zadd("dead", {member(f"d{i}"): i for i in range(3)})
    r.sadd("queues", "low")
    r.lpush("queue:low", member("q0", queue="low"), member("q1", queue="low"))
    task, _jids = a_task_with_errors(r)
    button = re.search(r'<button[^>]*value="retry_errors"[^>]*>',
                       client.get(f"/tasks/{task.id}").text).group()
    urls = [count_urls(client.get("/dead").text)["delete"],
            count_urls(client.get("/queues/low").text)["clear"],
            html.unescape(re.search(r'data-count="([^"]*)"', button).group(1))]
    assert [u.split("?")[0] for u in urls] == ["/dead/count", "/count/queue/low",
                                               f"/count/task/{task.id}"]
    before = set(r.keys("*"))
    # When another site asks for them (an <img> or a link: no token header, no cookie)
    stranger = TestClient(client.app, base_url="http://localhost")
    for url in urls:
        assert stranger.get(url).status_code == 403, url
        # (nor with the cookie of a visit but no header: a cross-site GET carries no header)
        assert client.get(url, headers={"x-csrf-token": ""}).status_code == 403, url
    # Then Redis holds no copy: not a key more than before
    assert set(r.keys("*")) == before
    # While the page's own questions, with its token, get their counts, each with its copy
    # and its marker (the task's: one copy of Retries and one of Dead, one marker each)
    tokens = [client.get(url).json()["token"] for url in urls]
    added = {k.decode() for k in set(r.keys("*")) - before}
    assert len(added) == 8
    assert {k.rsplit(":", 1)[0] for k in added} == {"queued:snapshot", "queued:snapshot-held"}
    for token in tokens[:2]:
        assert {f"queued:snapshot:{token}", f"queued:snapshot-held:{token}"} <= added


def test_a_search_s_retry_all_retries_at_most_the_matches_it_counted(client, r):
    r.zadd("retry", {member(f"a{i}", klass="A"): time.time() + 60 + i for i in range(4)})
    r.zadd("retry", {member("b", klass="B"): time.time() + 60})
    url = count_urls(client.get("/retries?class=A").text)["retry"]
    asked = client.get(url).json()
    assert asked["count"] == 4
    r.zadd("retry", {member("a-late", klass="A"): time.time() + 60})
    done = post(client, "/retries?class=A", action="retry", scope="all", f_class="A",
                snapshot=asked["token"], counted="4")
    assert flash_of(done.text) == ("retried 4 jobs of the 4 counted when asked (every match "
                                   "then; any since are left)")
    assert sorted(json.loads(m)["jid"] for m in r.zrange("retry", 0, -1)) == ["a-late", "b"]


def test_clear_of_a_queue_deletes_at_most_the_jobs_its_question_counted(client, r):
    r.sadd("queues", "low")
    r.lpush("queue:low", *[member(f"old{i}", queue="low") for i in range(3)])
    for path in ("/queues", "/queues/low"):
        assert count_urls(client.get(path).text)["clear"].startswith("/count/queue/low?")
    asked = client.get(count_urls(client.get("/queues/low").text)["clear"]).json()
    assert asked["count"] == 3
    r.rpop("queue:low")  # a worker takes the oldest; 5 more are pushed
    r.lpush("queue:low", *[member(f"new{i}", queue="low") for i in range(5)])
    done = post(client, "/queues/low", action="clear", snapshot=asked["token"], counted="3")
    assert flash_of(done.text) == ("cleared low: 2 jobs deleted of the 3 counted when asked "
                                   "(jobs pushed since stay)")
    assert [json.loads(m)["jid"] for m in r.lrange("queue:low", 0, -1)] == \
        [f"new{i}" for i in range(4, -1, -1)]


def test_clear_says_how_many_in_words(client, r):
    # (finding 14: "cleared victim: 1 jobs deleted")
    r.sadd("queues", "victim")
    r.lpush("queue:victim", member("j", queue="victim"))
    done = post(client, "/queues/victim", action="clear")
    assert flash_of(done.text) == "cleared victim: 1 job deleted"


# --- 1, 10. a task's "Retry its errors now" -----------------------------------------------------

def a_task_with_errors(r):
    """A task of 6 jobs: 3 waiting in Retries, 2 dead, 1 deleted from Retries by an operator
    (a final error in the task, in no set)."""
    task = Task("retry twice")
    with task:
        jids = Job.perform_bulk([[i] for i in range(6)])
    for jid in jids:
        msg = {**json.loads(r.rpop("queue:default")), "error_class": "RuntimeError",
               "error_message": "boom", "retry_count": 0, "failed_at": time.time()}
        r.zadd("retry" if jid in jids[:4] else "dead", {json.dumps(msg): time.time() + 3600})
    admin = Admin(r)
    assert admin.retries.delete(admin.retries.find(jids[3]))
    return task, jids


def bury_each_retry(client, r) -> None:
    """Each job the dashboard retries from Retries dies at once: its retry buries it in dead
    (so a walk of Dead after Retries would meet it again)."""
    admin = client.app.state.web.admin
    act = admin.retries._act

    def retried_then_dead(action, entries, *a, **kw):
        done = act(action, entries, *a, **kw)
        while (raw := r.rpop("queue:default")) is not None:
            r.zadd("dead", {json.dumps({**json.loads(raw), "error_message": "buried"}): 1})
        return done
    admin.retries._act = retried_then_dead


def test_a_tasks_errors_are_counted_where_they_can_be_retried_and_retried_once(
        producer, client, r):
    task, jids = a_task_with_errors(r)
    page = client.get(f"/tasks/{task.id}").text
    # The question counts, at the click, the task's jobs that can be retried
    button = re.search(r'<button[^>]*value="retry_errors"[^>]*>', page).group()
    assert html.unescape(re.search(r'data-confirm="([^"]*)"', button).group(1)) == (
        "Retry {n} jobs of this task now ({retry} waiting for a retry, {dead} dead)?")
    asked = client.get(html.unescape(re.search(r'data-count="([^"]*)"', button).group(1))).json()
    assert {k: asked[k] for k in ("count", "retry", "dead")} == {"count": 5, "retry": 3,
                                                                  "dead": 2}
    # When each job retried from Retries dies at once (its retry buries it)
    bury_each_retry(client, r)
    done = post(client, f"/tasks/{task.id}", action="retry_errors", snapshot=asked["token"],
                counted="5")
    # Then each was retried once: 3 from Retries, the 2 dead at the click
    assert flash_of(done.text) == (f"retried 5 jobs of task {task.id} now (3 from Retries, 2 "
                                   f"from Dead)")
    assert sorted(json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)) == \
        sorted(jids[4:])
    assert r.zcard("dead") == 3


def test_without_the_question_s_count_both_sets_are_copied_before_either_is_walked(
        producer, client, r):
    task, jids = a_task_with_errors(r)
    bury_each_retry(client, r)
    done = post(client, f"/tasks/{task.id}", action="retry_errors")
    assert flash_of(done.text) == (f"retried 5 jobs of task {task.id} now (3 from Retries, 2 "
                                   f"from Dead)")
    # Each was retried once: the 3 buried by their retry stay dead, the 2 dead at the click wait
    assert sorted(json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)) == \
        sorted(jids[4:])
    assert r.zcard("dead") == 3


# --- 12. a process named "*" ---------------------------------------------------------------------

def a_process(r, identity):
    r.sadd("processes", identity)
    r.hset(identity, mapping={"info": json.dumps({"hostname": "h", "pid": 1, "queues": ["x"],
                                                  "concurrency": 1, "identity": identity}),
                              "beat": time.time(), "busy": 0, "quiet": "false"})


def test_a_process_named_star_is_one_process(client, r):
    a_process(r, "*")
    a_process(r, "h:2:other")
    page = client.get("/busy").text
    row = rows_by(page, "data-identity")["*"]
    fields = dict(re.findall(r'<input type="hidden" name="(identity~?)" value="([^"]*)">', row))
    # When the row of "*" is stopped, with what its form carries
    done = client.post("/busy", data={"csrf_token": token_of(page), "action": "stop",
                                      **{k: html.unescape(v) for k, v in fields.items()}})
    # Then exactly that process is told to stop
    assert flash_of(done.text) == "stop sent to *"
    assert (r.lrange("*-signals", 0, -1), r.lrange("h:2:other-signals", 0, -1)) == ([b"TERM"], [])
    # And "Stop all" tells the processes the page listed, each once
    r.delete("*-signals")
    form = re.search(r'<form[^>]*id="all-processes".*?</form>', page, re.S).group()
    listed = sorted(html.unescape(v) for v in re.findall(
        r'<input type="hidden" name="identity" value="([^"]*)">', form))
    assert listed == ["*", "h:2:other"]
    done = client.post("/busy", data={"csrf_token": token_of(page), "action": "stop",
                                      "scope": "all", "identity": listed})
    assert flash_of(done.text) == "stop sent to 2 processes"
    assert (r.lrange("*-signals", 0, -1), r.lrange("h:2:other-signals", 0, -1)) == (
        [b"TERM"], [b"TERM"])


def test_stop_all_stops_only_the_processes_its_question_counted(client, r):
    a_process(r, "h:1:a")
    page = client.get("/busy").text
    a_process(r, "h:3:started-since")  # (not on the page the operator answered)
    done = client.post("/busy", data={"csrf_token": token_of(page), "action": "stop",
                                      "scope": "all", "identity": ["h:1:a"]})
    assert flash_of(done.text) == "stop sent to 1 process"
    assert r.lrange("h:3:started-since-signals", 0, -1) == []


# --- 14. odd parameters are never a 500 --------------------------------------------------------

def exact_token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode("utf-8", "surrogatepass")).decode().rstrip("=")


@pytest.mark.parametrize("path, status", [
    (f"/find?jid~={exact_token(chr(0xDCFF))}", 200),
    ("/find?jid=a", 200),
    ("/dead?class=X&cursor=18446744073709551616", 200),
    ("/dead?class=X&cursor=-5", 200),
    ("/dead/nan/x", 404),
    ("/dead/0x10/x", 404),
    ("/retries/inf/x", 404),
])
def test_odd_parameters_are_never_a_500(client, r, path, status):
    r.zadd("dead", {member("j", klass="X"): 5})
    assert client.get(path, headers={"accept": "text/html"}).status_code == status


def test_a_task_page_with_a_cursor_past_any_is_not_a_500(producer, client, r):
    task = Task("t")
    with task:
        Job.perform_async(1)
    assert client.get(f"/tasks/{task.id}?cursor=18446744073709551616").status_code == 200


# --- 6. one odd job never stops Retry all --------------------------------------------------------

def test_retry_all_with_a_job_whose_queue_is_a_lone_surrogate(client, r):
    r.zadd("dead", {member(f"g{i}", queue="rt1q"): i for i in range(499)})
    r.zadd("dead", {ODD: 1000})
    done = post(client, "/dead", action="retry", scope="all")
    assert flash_of(done.text) == "retried 500 jobs (the whole set)"
    assert r.zcard("dead") == 0 and r.llen("queue:rt1q") == 499
    assert r.llen("queue:emails-\ufffd".encode()) == 1


# --- 3, 8. Find ---------------------------------------------------------------------------------

def test_the_jid_link_of_a_php_job_finds_it(client, r):
    raw = php_json({"class": "X", "queue": "phpq", "args": [], "jid": "ab/cd",
                    "enqueued_at": time.time()})
    r.sadd("queues", "phpq")
    r.lpush("queue:phpq", raw)
    page = client.get("/queues/phpq").text
    link = html.unescape(re.search(r'<a class="jid" href="(/find[^"]*)"', page).group(1))
    found = client.get(link).text
    assert "Not found anywhere now" not in found
    assert list(rows_by(found, "data-where")) == ["queue"]


# --- 9. periodic jobs named by their keys ---------------------------------------------------

def cron_job(r, name: bytes, name_field: bytes | None = None):
    r.sadd("cron_jobs", b"cron_job:" + name)
    r.hset(b"cron_job:" + name, mapping={
        b"name": name if name_field is None else name_field, b"cron": b"0 0 1 1 *",
        b"klass": b"Ok", b"status": b"enabled",
        b"message": json.dumps({"class": "Ok", "queue": "default", "args": []}).encode()})


def test_queuedctl_cron_names_each_schedule_by_its_key(r, redis_url):
    for name in (b"plain", b"\xff\xfe", b"keyA"):
        cron_job(r, name, b"plain" if name == b"keyA" else None)
    listed = ctl_json("cron", url=redis_url)
    assert sorted(row["name"] for row in listed) == sorted(["plain", "\udcff\udcfe", "keyA"])
    proc = ctl("cron", "disable", "\udcff\udcfe", url=redis_url)
    assert proc.returncode == 0 and proc.stdout.startswith('periodic job "\\xff\\xfe" disabled')
    assert r.hget(b"cron_job:\xff\xfe", "status") == b"disabled"
    assert r.hget(b"cron_job:plain", "status") == b"enabled"
    # "plain" is the key cron_job:plain, not cron_job:keyA whose name field is "plain"
    proc = ctl("cron", "disable", "plain", url=redis_url)
    assert proc.returncode == 0
    assert r.hget(b"cron_job:plain", "status") == b"disabled"
    assert r.hget(b"cron_job:keyA", "status") == b"enabled"


def test_a_tasks_errors_all_dead_are_retried_by_the_counted_answer(producer, client, r):
    # Given a task whose errors are all dead: Retries holds none (no key at all to copy)
    task = Task("all dead")
    with task:
        jids = Job.perform_bulk([[i] for i in range(2)])
    for jid in jids:
        msg = {**json.loads(r.rpop("queue:default")), "error_class": "RuntimeError",
               "error_message": "boom", "retry_count": 0, "failed_at": time.time()}
        r.zadd("dead", {json.dumps(msg): time.time()})
    assert not r.exists("retry")
    asked = client.get(f"/count/task/{task.id}?hold=1").json()  # (what the button asks)
    assert {k: asked[k] for k in ("count", "retry", "dead")} == {"count": 2, "retry": 0,
                                                                  "dead": 2}
    done = post(client, f"/tasks/{task.id}", action="retry_errors", snapshot=asked["token"],
                counted="2")
    assert flash_of(done.text) == (f"retried 2 jobs of task {task.id} now (0 from Retries, 2 "
                                   f"from Dead)")
    assert sorted(json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)) == sorted(jids)
    assert not r.keys("queued:snapshot*")


def test_the_counted_answer_on_a_set_that_was_empty_does_nothing_and_says_so(client, r):
    # (an empty set is no key: its copy is none; a job that died since is not acted on)
    asked = client.get(count_urls(client.get("/dead").text)["delete"]).json()
    assert asked["count"] == 0
    r.zadd("dead", {member("late"): 1})
    done = post(client, "/dead", action="delete", scope="all", snapshot=asked["token"],
                counted="0")
    assert flash_of(done.text) == ("deleted 0 jobs of the 0 counted when asked (the whole set "
                                   "then; any since are left)")
    assert r.zcard("dead") == 1 and not r.keys("queued:snapshot*")


# --- red team RT4 ------------------------------------------------------------------------------

@pytest.mark.parametrize("counted", ["\u00b2", "\u0663", "-1", "1_000", " 3"])
def test_an_answer_whose_count_is_not_a_decimal_number_says_so_and_is_not_a_500(client, r,
                                                                                  counted):
    # Given a job in Retries counted for "Kill all" (RT4 #4: "²" is a digit to str.isdigit)
    r.zadd("retry", {member("s1"): time.time() + 3600})
    asked = client.get(count_urls(client.get("/retries").text)["kill"]).json()
    # When the answer comes with a count that is not the decimal number the page sent
    done = post(client, "/retries", action="kill", scope="all", snapshot=asked["token"],
                counted=counted)
    # Then the job is killed and the message says the count it did not read is unknown
    assert done.status_code == 200
    assert flash_of(done.text) == ("killed 1 job of the ? counted when asked (the whole set "
                                   "then; any since are left)")
    assert (r.zcard("retry"), r.zcard("dead")) == (0, 1)


OTHER = ("nothing done: that question counted other jobs (another set, queue or search); "
         "ask again")


def test_a_question_is_answered_once_even_by_two_answers_at_once(client, r):
    # Given Dead's 3 jobs counted for "Delete all"
    r.zadd("dead", {member(f"old{i}"): i for i in range(3)})
    asked = client.get(count_urls(client.get("/dead").text)["delete"]).json()
    admin = Admin(r)
    # When two answers take its copy at once, from two threads let go together (RT4 #5: both
    # were taken; the second's message said "deleted 0 jobs of the 3 counted")
    together = threading.Barrier(2)
    taken, refused = [], []

    def answer():
        together.wait()
        try:
            taken.append(admin.dead.resume(asked["token"]))
        except Gone as gone:
            refused.append(str(gone))

    answers = [threading.Thread(target=answer) for _ in range(2)]
    for thread in answers:
        thread.start()
    for thread in answers:
        thread.join()
    # Then exactly one takes it and the other finds it answered
    assert (len(taken), len(refused)) == (1, 1)
    assert "answered already" in refused[0]
    with taken[0] as first:
        assert admin.dead.delete_all(None, snapshot=first) == 3


def test_a_question_s_token_acts_only_where_it_was_counted(producer, client, r):
    # Given Dead's 2 jobs and Retries' 1 job, a task's errors, and a search on Retries
    r.zadd("dead", {member(f"d{i}", klass="A"): i for i in range(2)})
    r.zadd("retry", {member("r0", klass="A"): time.time() + 3600})
    dead_token = client.get(count_urls(client.get("/dead").text)["delete"]).json()["token"]
    search = client.get(count_urls(client.get("/retries?class=A").text)["kill"]).json()["token"]
    task, _jids = a_task_with_errors(r)
    task_token = client.get(f"/count/task/{task.id}?hold=1").json()["token"]
    before = {k: sorted(r.zrange(k, 0, -1)) for k in ("dead", "retry")}
    # When Dead's token answers Retries' "Delete all", the search's token another search
    # (RT4 #5: "deleted 0 jobs of the 250 counted"), a task's Dead copy retries all of Dead
    answers = [("/retries", dict(action="delete", scope="all", snapshot=dead_token)),
               ("/retries", dict(action="kill", scope="all", f_class="B", snapshot=search)),
               ("/retries", dict(action="kill", scope="all", snapshot=search)),
               ("/dead", dict(action="retry", scope="all", snapshot=f"{task_token}-dead"))]
    for path, form in answers:
        # Then each is refused and does nothing
        assert flash_of(post(client, path, counted="1", **form).text) == OTHER, form
    assert {k: sorted(r.zrange(k, 0, -1)) for k in ("dead", "retry")} == before
    # And the questions they were counted for are still answered by their own pages
    done = post(client, "/dead", action="delete", scope="all", snapshot=dead_token, counted="2")
    assert flash_of(done.text).startswith("deleted 2 jobs of the 2 counted")
    done = post(client, "/retries?class=A", action="kill", scope="all", f_class="A",
                snapshot=search, counted="1")
    assert flash_of(done.text).startswith("killed 1 job of the 1 counted")


@pytest.mark.parametrize("port", ["\u00b2", "\u0663", "+80", " 80"])
def test_a_port_that_is_not_decimal_digits_is_refused_not_an_exception(port):
    # (a Host header is read as latin-1: "localhost:\xb2" reached int() and raised)
    from queued.admin.ctlweb import Usage, parse_bind
    from queued.admin.hosts import parse_host
    assert parse_host(f"localhost:{port}") is None
    with pytest.raises(Usage):
        parse_bind(f"127.0.0.1:{port}")
