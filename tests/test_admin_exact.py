"""Operator actions act on exactly what they say (red team RT1, findings 1, 3, 4, 6, 7, 8, 11, 13):
an action on several sets acts once on each job present in any of them when it began; the number
in a question bounds what is done; one odd member never stops a bulk action; ``find`` does
bounded work whatever is typed and finds jids as PHP's json_encode spells them; ``task --watch``
of a task that goes away ends; ``pause`` says why truthfully; the ``errors`` follow-up takes
exactly one group. Against a real redis-server, queuedctl as a subprocess (on a
pseudo-terminal where it asks), PHP's own json_encode."""
from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import time

import pytest

import queued
from queued.admin import find as find_mod
from queued.admin import jobsets, taskadmin
from queued.admin.api import Admin
from queued.admin.entries import Entry, Filter
from queued.admin.errors import error_groups
from queued.task import Task

from conftest import IN_CI
from ctlrun import ctl, ctl_env, ctl_json, ok, rows
from harness import ROOT, wait_for


class Pay(queued.Job):
    def perform(self, n):
        pass


def member(jid, klass="X", queue="default", **extra) -> str:
    return json.dumps({"class": klass, "queue": queue, "args": [jid], "jid": jid,
                       "retry_count": 0, **extra})


# --- 1. an action on two sets acts once on each job present in either ----------------------------

def test_retrying_a_tasks_errors_retries_each_job_once_though_its_retry_dies_at_once(
        producer, r):
    # Given a task of 5 jobs waiting in the retry set, and 2 of its jobs dead already
    task = Task("retry twice")
    with task:
        jids = Pay.perform_bulk([[i] for i in range(7)])
    for jid in jids:
        raw = r.rpop("queue:default")
        msg = {**json.loads(raw), "error_class": "RuntimeError", "error_message": "first",
               "retry_count": 0, "failed_at": time.time()}
        r.zadd("retry" if jid in jids[:5] else "dead", {json.dumps(msg): time.time() + 3600})
    admin = Admin(r)
    # And workers that run each job retried at once, whose run ends in Dead straight away
    # (self.bury(), a poison pill, a kill): it dies again before the Dead set is walked
    pushed = []
    act = admin.retries._act

    def retried_then_dead(action, entries, *a, **kw):
        done = act(action, entries, *a, **kw)
        while (raw := r.rpop("queue:default")) is not None:
            msg = json.loads(raw)
            pushed.append(msg["jid"])
            r.zadd("dead", {json.dumps({**msg, "error_message": "buried"}): time.time()})
        return done
    admin.retries._act = retried_then_dead
    # When the task's errors are retried (the task page's "Retry its errors now")
    waiting, dead = taskadmin.retry_errors(admin, Task.find(task.id))
    # Then each job present at the click was retried once: 5 from Retries, the 2 dead
    assert (waiting, dead) == (5, 2)
    assert sorted(pushed) == sorted(jids[:5])
    queued_now = sorted(json.loads(raw)["jid"] for raw in r.lrange("queue:default", 0, -1))
    assert queued_now == sorted(jids[5:])
    assert r.zcard("dead") == 5  # (the 5 that died again wait there, not retried twice)


def test_act_together_copies_every_set_before_acting_on_any(r):
    r.zadd("retry", {member(f"r{i}"): i for i in range(3)})
    r.zadd("dead", {member(f"d{i}"): i for i in range(2)})
    admin = Admin(r)
    act = admin.retries._act

    def and_a_new_death(action, entries, *a, **kw):
        r.zadd("dead", {member("died-meanwhile"): 99})
        return act(action, entries, *a, **kw)
    admin.retries._act = and_a_new_death
    assert jobsets.act_together("retry", [admin.retries, admin.dead]) == [3, 2]
    assert [json.loads(m)["jid"] for m in r.zrange("dead", 0, -1)] == ["died-meanwhile"]


# --- 6. one odd member never stops a bulk action -------------------------------------------------

ODD = (b'{"class":"Ok","queue":"emails-\\ud83d","args":[],"jid":"odd","retry_count":0,'
       b'"error_class":"E","error_message":"m"}')


def test_a_job_whose_queue_is_a_lone_surrogate_is_retried_with_its_batch(r, redis_url):
    # Given 499 dead jobs and one whose queue is a lone surrogate (Node's cut emoji)
    now = time.time()
    r.zadd("dead", {member(f"g{i}", queue="rt1q"): now - i for i in range(499)})
    r.zadd("dead", {ODD: now - 0.5})
    # When every dead job is retried
    proc = ctl("retry", "dead", "--all", "--yes", url=redis_url)
    # Then all 500 are, the odd one to the queue its producer pushed to (U+FFFD for the
    # half emoji, as JavaScript's and Ruby's UTF-8 encoders write it)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0, "500 jobs retried (enqueued now) from dead\n", "")
    assert r.zcard("dead") == 0 and r.llen("queue:rt1q") == 499
    assert [json.loads(m)["jid"] for m in r.lrange("queue:emails-\ufffd".encode(), 0, -1)] == \
        ["odd"]
    assert r.smembers("queues") == {b"rt1q", "emails-\ufffd".encode()}


@pytest.mark.parametrize("action, effect", [("delete", None), ("kill", "dead")])
def test_a_job_whose_queue_is_a_lone_surrogate_is_acted_on_alone(r, redis_url, action, effect):
    r.zadd("retry", {ODD: time.time() + 60, member("other"): time.time() + 60})
    assert ctl_json(action, "retry", "odd", url=redis_url) == {
        "action": action, "set": "retry", "done": 1, "not_found": []}
    assert [json.loads(m)["jid"] for m in r.zrange("retry", 0, -1)] == ["other"]
    assert r.zcard("dead") == (1 if effect == "dead" else 0)
    assert ok("jobs", "retry", url=redis_url).count("\n") == 2  # (the header and "other")


# --- 7. the number in a question bounds what is done ---------------------------------------------

def asked(args: list[str], url: str, meanwhile, answer: bytes = b"y\n") -> tuple[int, str]:
    """Run queuedctl on a pseudo-terminal; once it asks, call ``meanwhile()`` (more jobs
    arrive while the operator reads the question), then answer; (exit status, all it wrote)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "queued.admin.ctl", "--redis", url, *args],
                            stdin=slave, stdout=slave, stderr=slave, env=ctl_env(), cwd=ROOT)
    os.close(slave)
    seen = b""

    def read_until(text: bytes) -> bool:
        nonlocal seen
        try:
            seen += os.read(master, 4096)
        except OSError:
            return True
        return text in seen

    wait_for(lambda: read_until(b"[y/N]"), 30, what="the question")
    meanwhile()
    os.write(master, answer)
    status = proc.wait(60)
    while not read_until(b"\0"):
        pass
    os.close(master)
    return status, seen.decode("utf-8", "replace").replace("\r\n", "\n")


def test_a_bulk_delete_deletes_at_most_the_jobs_it_counted(r, redis_url):
    # Given 3 dead jobs
    r.zadd("dead", {member(f"old{i}"): time.time() - i for i in range(3)})
    # When the operator is asked, and 200 more die while the question is read, then yes
    status, said = asked(["delete", "dead", "--all"], redis_url,
                         lambda: r.zadd("dead", {member(f"new{i}"): time.time()
                                                 for i in range(200)}))
    # Then the 3 counted are deleted, and only they
    assert status == 0 and "delete 3 jobs from dead? [y/N] " in said
    assert "3 jobs deleted from dead" in said
    assert r.zcard("dead") == 200 and not [m for m in r.zrange("dead", 0, -1) if b"old" in m]


def test_a_filtered_bulk_retry_retries_at_most_the_matches_it_counted(r, redis_url):
    r.zadd("dead", {member(f"a{i}", klass="A"): i for i in range(4)})
    r.zadd("dead", {member("b", klass="B"): 10})
    status, said = asked(["retry", "dead", "--class", "A", "--all"], redis_url,
                         lambda: r.zadd("dead", {member("a-late", klass="A"): 20}))
    assert status == 0 and "retry 4 jobs from dead (enqueue them now)? [y/N]" in said
    assert "4 jobs retried (enqueued now) from dead" in said
    assert sorted(json.loads(m)["jid"] for m in r.zrange("dead", 0, -1)) == ["a-late", "b"]


def test_clearing_a_queue_deletes_at_most_the_jobs_it_counted(r, redis_url):
    # Given a queue of 3 jobs
    r.sadd("queues", "low")
    r.lpush("queue:low", *[member(f"old{i}") for i in range(3)])

    def meanwhile():  # a worker takes the oldest, a producer pushes 5 more
        r.rpop("queue:low")
        r.lpush("queue:low", *[member(f"new{i}") for i in range(5)])
    status, said = asked(["clear", "low"], redis_url, meanwhile)
    assert status == 0 and "Delete the 3 jobs of queue low? [y/N]" in said
    # Then the 2 counted jobs still there are deleted; the 5 pushed since wait, in order
    assert "cleared queue low: 2 jobs deleted" in said
    assert [json.loads(m)["jid"] for m in r.lrange("queue:low", 0, -1)] == \
        [f"new{i}" for i in range(4, -1, -1)]
    assert r.smembers("queues") == {b"low"}


def test_a_question_counts_a_copy_and_the_action_walks_that_copy(r):
    # (the API the command and the dashboard share)
    admin = Admin(r)
    r.zadd("dead", {member(f"j{i}", klass="A" if i % 2 else "B"): i for i in range(10)})
    with admin.dead.snapshot() as snap:
        assert admin.dead.count_in(snap, Filter.of(klass="A")) == 5
        r.zadd("dead", {member("late", klass="A"): 50})
        r.zrem("dead", member("j1", klass="A"))  # (another admin took one meanwhile)
        assert admin.dead.delete_all(Filter.of(klass="A"), snapshot=snap) == 4
    assert sorted(json.loads(m)["jid"] for m in r.zrange("dead", 0, -1)) == \
        ["j0", "j2", "j4", "j6", "j8", "late"]
    assert not r.keys("queued:snapshot*")


# --- 3, 8. find: bounded work, and jids as JSON spells them --------------------------------------

def script_calls(r) -> int:
    stats = r.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval"))


def test_find_with_a_short_jid_reads_a_queue_once(r, redis_url, monkeypatch):
    # Given a queue of 3,000 jobs whose jids, arguments and classes all contain "a"
    r.sadd("queues", "bigq")
    r.lpush("queue:bigq", *[json.dumps({"class": "Report", "queue": "bigq", "args": ["a", i],
                                        "jid": f"a{i:023x}", "enqueued_at": time.time()})
                            for i in range(3000)])
    admin = Admin(r)
    find_mod.locate(admin, "0123456789abcdef01234567")  # (the script loaded: EVALSHA from now)
    # When a short (mistyped) jid is looked for
    r.config_resetstat()
    replies = []
    real = find_mod.FIND_IN_LIST

    def spy(*args, **kwargs):
        replies.append(real(*args, **kwargs))
        return replies[-1]
    monkeypatch.setattr(find_mod, "FIND_IN_LIST", spy)
    places = find_mod.locate(admin, "a")
    # Then it is found nowhere (no job's jid is "a"), after one read of the queue: one script
    # call per 10,000 jobs, not one per job containing the text, and the script sends back no
    # element (the jobs holding "a" in their arguments are passed over inside Redis)
    assert places == [] and script_calls(r) == 1
    assert replies == [[-1, 3000]]
    # And an exact jid is found at its place
    r.config_resetstat()
    (place,) = find_mod.locate(admin, f"a{5:023x}")
    assert (place.where, place.position, place.length) == ("queue", 6, 3000)
    assert script_calls(r) == 1


def test_find_with_the_empty_jid_is_refused(redis_url):
    proc = ctl("find", "", url=redis_url)
    assert proc.returncode == 2 and "a jid cannot be empty" in proc.stderr


def php_json(value) -> bytes:
    """``json_encode`` of ``value`` by PHP itself (its defaults: ``\\/``, ``\\uXXXX``)."""
    if shutil.which("php") is None:
        if IN_CI:
            pytest.fail("php is not installed; CI must install it (scripts/test does)")
        pytest.skip("php not installed (apt-get install php-cli)")
    code = "echo json_encode(json_decode(stream_get_contents(STDIN), true));"
    return subprocess.run(["php", "-r", code], input=json.dumps(value).encode(),
                          capture_output=True, check=True).stdout


@pytest.mark.parametrize("jid", ["ab/cd", "café", "x/é"])
def test_jids_written_by_php_are_found_listed_and_acted_on(r, redis_url, jid):
    # Given jobs PHP encoded (json_encode writes "ab\/cd" and "caf\u00e9"), dead and waiting
    raw = php_json({"class": "X", "queue": "phpq", "args": [], "jid": jid,
                    "error_class": "E", "error_message": "m"})
    assert jid.encode() not in raw  # (the bytes spell it otherwise)
    r.zadd("dead", {raw: time.time()})
    r.sadd("queues", "phpq")
    r.lpush("queue:phpq", php_json({"class": "X", "queue": "phpq", "args": [], "jid": jid}))
    # Then find finds both, jobs --jid lists the dead one, retry acts on it by its jid
    found = ctl_json("find", jid, url=redis_url)
    assert [p["where"] for p in found["places"]] == ["queue", "dead"]
    assert [j["jid"] for j in ctl_json("jobs", "dead", "--jid", jid, url=redis_url)["jobs"]] \
        == [jid]
    assert ctl_json("retry", "dead", jid, url=redis_url)["done"] == 1
    assert r.zcard("dead") == 0 and r.llen("queue:phpq") == 2


# --- 4. task --watch of a task that goes away ----------------------------------------------------

def test_watching_a_task_that_is_deleted_ends_with_one_line_and_exit_1(producer, r, redis_url):
    task = Task("goes away")
    with task:
        Pay.perform_async(1)
    proc = subprocess.Popen([sys.executable, "-m", "queued.admin.ctl", "--redis", redis_url,
                             "task", task.id, "--watch", "--every", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ctl_env(), cwd=ROOT)
    try:
        wait_for(lambda: proc.stdout.readline(), 20, what="the first progress line")
        assert taskadmin.delete_task(Task.find(task.id))
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert stderr == (f"queuedctl: task {task.id} is gone (deleted, or expired) while it was "
                      f"watched\n")


# --- 11. pause says why, truthfully --------------------------------------------------------------

def test_pause_of_a_queue_holding_jobs_that_is_not_listed_in_queues(r, redis_url):
    # Given a queue a producer LPUSHed to without SADD queues
    r.lpush("queue:phponly", member("p1", queue="phponly"))
    proc = ctl("pause", "phponly", url=redis_url)
    # Then it is paused (no live process serves it: the warning, exit 1), never "no jobs"
    assert r.smembers("paused") == {b"phponly"}
    assert proc.returncode == 1 and "holds no jobs" not in proc.stderr
    assert proc.stdout == "paused queue phponly: workers take no more jobs from it (1 waiting)\n"
    assert "no live process serves queue phponly" in proc.stderr


# --- 13. the errors follow-up takes exactly one group --------------------------------------------

def test_error_class_picks_exactly_one_group_of_errors(r, redis_url):
    # Given two groups of Charge: 2 RuntimeError, 5 CardError whose messages name RuntimeError
    for i in range(2):
        r.zadd("dead", {member(f"r{i}", klass="Charge", error_class="RuntimeError",
                               error_message="boom"): i})
    for i in range(5):
        r.zadd("dead", {member(f"c{i}", klass="Charge", error_class="CardError",
                               error_message="declined (gateway RuntimeError)"): 10 + i})
    groups = ctl_json("errors", "dead", url=redis_url)
    assert [(g["class"], g["error_class"], g["count"]) for g in groups] == [
        ("Charge", "CardError", 5), ("Charge", "RuntimeError", 2)]
    # When the RuntimeError group is listed and deleted by its class and error class
    listed = rows(ok("jobs", "dead", "--class", "Charge", "--error-class", "RuntimeError",
                     url=redis_url))
    assert sorted(row[1] for row in listed) == ["r0", "r1"]
    assert ok("delete", "dead", "--class", "Charge", "--error-class", "RuntimeError", "--all",
              "--yes", url=redis_url) == "2 jobs deleted from dead\n"
    # Then exactly its 2 jobs went; the other group is whole
    assert r.zcard("dead") == 5


# --- red team RT4, finding 2: an answer after the question's copy has gone does nothing ---------

def drop_copies(r) -> None:
    """What an answer after the copy's TTL finds: the copy (and its mark) gone."""
    for key in r.keys("queued:snapshot*"):
        r.delete(key)


def test_a_bulk_delete_answered_after_its_copy_expired_does_nothing_and_says_so(r, redis_url):
    # Given 3 dead jobs, counted for the question
    r.zadd("dead", {member(f"old{i}"): time.time() - i for i in range(3)})

    def meanwhile():  # the question is left open past its copy's life; 2 more die
        drop_copies(r)
        r.zadd("dead", {member(f"new{i}"): time.time() for i in range(2)})
    status, said = asked(["delete", "dead", "--all"], redis_url, meanwhile)
    # Then nothing is deleted, and it says so, exit 1 (it said "0 jobs deleted", exit 0)
    assert status == 1 and "delete 3 jobs from dead? [y/N] " in said
    assert said.endswith("nothing done: the jobs counted for that question are gone (it was "
                         "asked more than 10 minutes ago, or answered already); ask again\n")
    assert r.zcard("dead") == 5


def test_a_clear_answered_after_its_copy_expired_does_nothing_and_says_so(r, redis_url):
    r.sadd("queues", "cq")
    r.lpush("queue:cq", *[member(f"q{i}") for i in range(3)])
    status, said = asked(["clear", "cq"], redis_url, lambda: drop_copies(r))
    assert status == 1 and "Delete the 3 jobs of queue cq? [y/N]" in said
    assert said.endswith("nothing done: the jobs counted for that question are gone (it was "
                         "asked more than 10 minutes ago, or answered already); ask again\n")
    assert r.llen("queue:cq") == 3


# --- red team RT4, finding 6: odd members of Dead --------------------------------------------

NOT_JOBS = [b"not json \xff", b"[1, 2]", b'"a string"', b'{"class": "X", "jid": "bad \xff"}']


def test_retry_all_on_dead_leaves_what_is_not_a_job_where_it_is(r):
    # Given Dead holding 2 jobs and 4 members that are not jobs (not JSON, not UTF-8, an array)
    r.zadd("dead", {member("j1"): 1, member("j2"): 2})
    r.zadd("dead", {raw: 10 + i for i, raw in enumerate(NOT_JOBS)})
    admin = Admin(r)
    # When every job of Dead is retried (counted first, as a question does)
    with admin.dead.snapshot() as snap:
        assert admin.dead.count_in(snap) == 6
        retried = admin.dead.retry_all(None, snapshot=snap)
    # Then the 2 jobs are retried and counted so; the others stay in Dead (pushed to default
    # and counted as retried, they came back as "unusable payload")
    assert retried == 2
    assert sorted(json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)) == ["j1", "j2"]
    assert sorted(r.zrange("dead", 0, -1)) == sorted(NOT_JOBS)


def test_errors_groups_an_error_class_that_is_not_text_by_its_json(r):
    # Given dead jobs whose error_class is a JSON array and a number (written by hand)
    r.zadd("dead", {member("a", error_class=["x"], error_message={"k": 1}): 1,
                    member("b", error_class=7, error_message="m"): 2})
    groups = {g.error_class: g for g in error_groups(Admin(r).dead)}
    # Then each group is named by the JSON it holds (it read "['x']", Python's repr)
    assert sorted(groups) == ['7', '["x"]']
    assert groups['["x"]'].latest_message == '{"k": 1}'
    # and --error-class picks that group exactly
    picked = [e.jid for e in Admin(r).dead.scan(Filter.of(error_class='["x"]'))]
    assert picked == ["a"]


# --- F4 #2: the argument search finds what the dashboard's Arguments column shows ---------------

def test_an_argument_search_finds_the_text_the_arguments_column_shows():
    nul, fffd, zw, pair = (Entry(json.dumps({"class": "X", "args": args}).encode(), 1.0, "dead")
                           for args in (["a\x00b", 1], ["a\ufffdb", 1], ["z\u200bw"], ["a", 1]))
    def found(text):
        return [label for e, label in ((nul, "nul"), (fffd, "fffd"), (zw, "zw"), (pair, "pair"))
                if Filter.of(arg=text).matches(e)]
    # As the column shows them (a space after each separator) and compact, as queuedctl does
    assert found('"a", 1') == found('"a",1') == ["pair"]
    # A NUL as the column writes it (\u0000) or raw (a link's %00): that job only
    assert found(r"a\u0000b") == found("a\x00b") == ["nul"]
    assert found("a\ufffdb") == ["fffd"]
    # A zero-width space is shown escaped (\u200b), and found as shown or raw
    assert found(r"z\u200bw") == found("z\u200bw") == ["zw"]


# --- F4 #3: a job whose payload names no queue is never retried into "default" ------------------

#: Payloads whose "queue" is "", null or a number (Sidekiq 6.4's client refuses each: "Job must
#: include a valid queue name"), beside one without a "queue" (Sidekiq fills in "default") and
#: an ordinary one.
NO_QUEUE = {"empty": "", "null": None, "number": 7}


def no_queue_set(r, zset: str) -> None:
    r.zadd(zset, {member(jid, queue=queue): i for i, (jid, queue) in enumerate(NO_QUEUE.items())})
    absent = {k: v for k, v in json.loads(member("absent")).items() if k != "queue"}
    r.zadd(zset, {json.dumps(absent): 10, member("low", queue="low"): 11})


def jids_in(r, key: str) -> list[str]:
    raws = r.zrange(key, 0, -1) if r.type(key) == b"zset" else r.lrange(key, 0, -1)
    return sorted(json.loads(raw)["jid"] for raw in raws)


@pytest.mark.parametrize("name", ["dead", "retry", "schedule"])
def test_the_api_leaves_a_job_that_names_no_queue_where_it_is(r, name):
    no_queue_set(r, name)
    js = Admin(r).jobset(name)
    # When each is retried by itself, Then it says why it cannot be, and it stays
    for jid, queue in NO_QUEUE.items():
        with pytest.raises(jobsets.Unmovable) as caught:
            js.retry(js.find(jid))
        assert caught.value.reason == f'a job must name its queue: its "queue" is ' \
                                      f'{json.dumps(queue)}'
        assert caught.value.kind == jobsets.NO_QUEUE and caught.value.entry.jid == jid
    # When every job is retried, Then the two that name a queue (or none: default) are pushed,
    # the three that name no queue stay, each said
    left = []
    assert js.retry_all(left=left) == 2
    assert sorted(e.entry.jid for e in left) == sorted(NO_QUEUE)
    assert jids_in(r, name) == sorted(NO_QUEUE)
    assert jids_in(r, "queue:default") == ["absent"] and jids_in(r, "queue:low") == ["low"]
    assert not r.exists("queue:") and r.smembers("queues") == {b"default", b"low"}
    # and the page and queuedctl show the queue each names, not "default"
    assert {e.jid: e.queue for e in js.page()} == {"empty": "", "null": "null", "number": "7"}


def test_queuedctl_retry_leaves_a_job_that_names_no_queue_and_says_why(r, redis_url):
    no_queue_set(r, "dead")
    # When one is retried by its JID beside one that can be, Then one is retried, the other
    # left and said, exit 1
    proc = ctl("retry", "dead", "empty", "low", url=redis_url)
    assert proc.returncode == 1 and proc.stdout == "1 job retried (enqueued now) from dead\n"
    assert proc.stderr == ('queuedctl: 1 job left in dead, not retried: its payload names no '
                           'queue ("queue" is "", null or not a string): empty\n')
    # When every job of dead is retried, Then the rest that can be are, exit 0, and the three
    # that name no queue are left and named
    proc = ctl("retry", "dead", "--all", "--yes", url=redis_url)
    assert proc.returncode == 0 and proc.stdout == "1 job retried (enqueued now) from dead\n"
    assert proc.stderr == ('queuedctl: 3 jobs left in dead, not retried: its payload names no '
                           'queue ("queue" is "", null or not a string): empty, null, number\n')
    assert jids_in(r, "dead") == sorted(NO_QUEUE)
    assert jids_in(r, "queue:default") == ["absent"] and jids_in(r, "queue:low") == ["low"]
    assert not r.exists("queue:")


def test_a_tasks_retry_of_its_errors_leaves_a_job_that_names_no_queue(producer, r):
    # Given a task whose two jobs died, one of them naming no queue ("queue": "")
    task = Task("no queue")
    with task:
        jids = Pay.perform_bulk([[1], [2]])
    for jid in jids:
        msg = {**json.loads(r.rpop("queue:default")), "error_class": "E", "error_message": "m",
               "retry_count": 0, "failed_at": time.time()}
        if jid == jids[0]:
            msg["queue"] = ""
        r.zadd("dead", {json.dumps(msg): time.time()})
    # When its errors are retried, Then the one that names its queue is, the other stays
    assert taskadmin.retry_errors(Admin(r), Task.find(task.id)) == (0, 1)
    assert jids_in(r, "queue:default") == [jids[1]] and jids_in(r, "dead") == [jids[0]]
    assert not r.exists("queue:")


def test_enqueue_now_of_a_periodic_job_that_names_no_queue_pushes_nothing(r, redis_url):
    # Given a sidekiq-cron job whose message's "queue" is "" (Ruby's sidekiq-cron wrote it)
    r.sadd("cron_jobs", "cron_job:blank")
    r.hset("cron_job:blank", mapping={
        "name": "blank", "cron": "0 0 1 1 *", "klass": "Ok", "status": "enabled",
        "message": json.dumps({"class": "Ok", "queue": "", "args": []})})
    # When it is pushed now, Then nothing is pushed, to "default" or to the queue named ""
    proc = ctl("cron", "enqueue", "blank", url=redis_url)
    assert proc.returncode == 1
    assert proc.stderr == ("queuedctl: periodic job 'blank' was not pushed: a job must name its "
                           'queue: its "queue" is ""\n')
    assert not r.exists("queue:") and not r.exists("queue:default") and not r.exists("queues")
    # and queuedctl cron lists the queue it names, not "default"
    assert [row["queue"] for row in ctl_json("cron", url=redis_url)] == [""]
