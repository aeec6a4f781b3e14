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
from queued.admin.entries import Filter
from queued.task import Task

from conftest import IN_CI
from ctlrun import ctl_env
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
    assert not r.keys("queued:snapshot:*")


# --- 3, 8. find: bounded work, and jids as JSON spells them --------------------------------------

def script_calls(r) -> int:
    stats = r.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval"))


def test_find_with_a_short_jid_reads_a_queue_once(r, redis_url):
    # Given a queue of 3,000 jobs whose jids, arguments and classes all contain "a"
    r.sadd("queues", "bigq")
    r.lpush("queue:bigq", *[json.dumps({"class": "Report", "queue": "bigq", "args": ["a", i],
                                        "jid": f"a{i:023x}", "enqueued_at": time.time()})
                            for i in range(3000)])
    admin = Admin(r)
    find_mod.locate(admin, "0123456789abcdef01234567")  # (the script loaded: EVALSHA from now)
    # When a short (mistyped) jid is looked for
    r.config_resetstat()
    places = find_mod.locate(admin, "a")
    # Then it is found nowhere (no job's jid is "a"), after one read of the queue: one script
    # call per 10,000 jobs, not one per job containing the text
    assert places == [] and script_calls(r) == 1
    # And an exact jid is found at its place
    r.config_resetstat()
    (place,) = find_mod.locate(admin, f"a{5:023x}")
    assert (place.where, place.position, place.length) == ("queue", 6, 3000)
    assert script_calls(r) == 1




def php_json(value) -> bytes:
    """``json_encode`` of ``value`` by PHP itself (its defaults: ``\\/``, ``\\uXXXX``)."""
    if shutil.which("php") is None:
        if IN_CI:
            pytest.fail("php is not installed; CI must install it (scripts/test does)")
        pytest.skip("php not installed (apt-get install php-cli)")
    code = "echo json_encode(json_decode(stream_get_contents(STDIN), true));"
    return subprocess.run(["php", "-r", code], input=json.dumps(value).encode(),
                          capture_output=True, check=True).stdout




# --- 4. task --watch of a task that goes away ----------------------------------------------------



# --- 11. pause says why, truthfully --------------------------------------------------------------



# --- 13. the errors follow-up takes exactly one group --------------------------------------------
