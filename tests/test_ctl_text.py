"""What ``queuedctl`` writes is safe and exact whatever Redis holds (red team RT1, findings 2, 5 and
14): text from jobs never drives the operator's terminal (escape sequences are shown escaped),
every name Redis can hold is listed without a traceback (bytes that are not UTF-8, lone
surrogates), under a strict UTF-8 stdout too, shown so that two names never look the same,
and addressed from the command line (the empty name, names with spaces); ``--json`` stays valid
UTF-8 JSON for any bytes. Real queuedctl subprocesses against a real redis-server; on a
pseudo-terminal where a person would see it."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time

import pytest

from ctlrun import ctl, ctl_env, ctl_json, ok, rows
from harness import ROOT

#: An error message that, printed raw, moves the cursor up 4 lines, erases to the end of the
#: screen and prints a calm line (then hides what follows): three real failures and the
#: header would vanish.
EVIL = "x\r\x1b[4A\x1b[J(no failures)\x1b[8m"
#: ... and what the operator sees instead.
EVIL_SHOWN = r"x \x1b[4A\x1b[J(no failures)\x1b[8m"
#: Sequences that must never reach a terminal from data: CSI (7-bit and the 8-bit C1 form),
#: OSC (a window title, an OSC-8 link), a bare carriage return inside a line.
RAW = ("\x1b[4A", "\x1b[J", "\x1b[8m", "\x9b", "\x1b]0;", "\x1b]8;")


def dead(r, jid, klass="Charge", error=("CardError", "declined"), queue="default", args=(),
         at=None):
    now = time.time()
    msg = {"class": klass, "queue": queue, "args": list(args), "jid": jid,
           "error_class": error[0], "error_message": error[1], "failed_at": now,
           "retry_count": 0}
    r.zadd("dead", {json.dumps(msg): at if at is not None else now})


def on_terminal(args: list[str], url: str) -> bytes:
    """Everything queuedctl writes when its stdout and stderr are a pseudo-terminal (rich
    tables, as a person sees them), as raw bytes."""
    master, slave = pty.openpty()
    argv = [sys.executable, "-m", "queued.admin.ctl", "--redis", url, *args]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            env=ctl_env(), cwd=ROOT)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(60) == 0, seen
    return seen


def evil_dead(r):
    for i in range(3):
        dead(r, f"real{i}", at=time.time() - 10 - i)
    dead(r, "evil", klass="Signup\x1b]0;pwned\x07", error=("ValueError", EVIL),
         args=["\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\", "\x9b2J"],
         at=time.time() - 20)


# --- 2. terminal escape sequences ---------------------------------------------------------------

def test_escape_sequences_in_job_data_are_shown_escaped_in_every_format_for_people(r, redis_url):
    # Given three real failures and one whose class, arguments and message carry escape
    # sequences (cursor up, erase, hide, a window title, an OSC-8 link, an 8-bit CSI)
    evil_dead(r)
    # When people read them: plain (a pipe), tsv, and rich tables on a terminal
    outputs = {
        "jobs plain": ok("jobs", "dead", url=redis_url),
        "errors plain": ok("errors", "dead", url=redis_url),
        "find plain": ok("find", "evil", url=redis_url),
        "jobs tsv": ok("jobs", "dead", "--format", "tsv", url=redis_url),
        "jobs table": on_terminal(["jobs", "dead"], redis_url).decode(),
        "errors table": on_terminal(["errors", "dead"], redis_url).decode(),
        "find table": on_terminal(["find", "evil"], redis_url).decode()}
    # Then no sequence from the data reaches the terminal: each is shown escaped
    for name, text in outputs.items():
        assert not [s for s in RAW if s in text], name
        assert r"\x1b[4A\x1b[J(no failures)\x1b[8m" in text, name
    # And off a terminal a carriage return is neither in the text nor in a line of its own
    for name in ("jobs plain", "errors plain", "find plain", "jobs tsv"):
        assert "\r" not in outputs[name], name
    # And the three real failures are all there, each on its line
    plain = rows(outputs["jobs plain"])
    assert [row[1] for row in plain] == ["real0", "real1", "real2", "evil"]
    assert plain[3][2] == r'"Signup\x1b]0;pwned\x07"'  # (a name with escapes: quoted)
    assert plain[3][5] == "ValueError: " + EVIL_SHOWN
    assert r'"\u009b2J"' in plain[3][4]  # (a C1 control: \u009b; \x9b is a byte not UTF-8)
    assert outputs["jobs tsv"].splitlines()[4].split("\t")[5] == \
        r"ValueError: x\r\x1b[4A\x1b[J(no failures)\x1b[8m"


# --- 5, 14. names and data that are not UTF-8 ----------------------------------------------------

@pytest.fixture
def odd_names(r):
    """A PHP producer's queue named by bytes that are not UTF-8, an ordinary queue, and a dead
    job whose arguments hold a lone surrogate (Node's JSON.stringify of a cut emoji)."""
    r.sadd("queues", "default", b"\xff\xfe")
    r.lpush(b"queue:\xff\xfe", json.dumps({"class": "X", "queue": "?", "args": [], "jid": "a"}))
    r.lpush("queue:default", json.dumps({"class": "X", "queue": "default", "args": [],
                                         "jid": "b"}))
    r.zadd("dead", {b'{"class":"Ok","queue":"default","args":["Hello \\ud83d"],'
                    b'"jid":"halfemoji","error_class":"E","error_message":"m",'
                    b'"retry_count":0}': time.time()})
    return r


def test_names_and_data_that_are_not_utf8_are_listed_under_a_strict_utf8_stdout(odd_names,
                                                                                 redis_url):
    # (ctl_env sets PYTHONIOENCODING=utf-8: stdout refuses what UTF-8 cannot encode)
    queues = rows(ok("queues", url=redis_url))
    assert [row[0] for row in queues] == ["default", r'"\xff\xfe"']
    assert [row[0] for row in rows(ok("stats", url=redis_url).split("\n\n")[1])] == \
        ["default", r'"\xff\xfe"']
    (job,) = rows(ok("jobs", "dead", url=redis_url))
    assert job[1:5] == ["halfemoji", "Ok", "default", r'["Hello \ud83d"]']
    assert ok("jobs", "dead", "--format", "tsv", url=redis_url).splitlines()[1].split(
        "\t")[4] == r'["Hello \ud83d"]'
    assert ok("pause", "default", "--force", url=redis_url) == (
        "paused queue default: workers take no more jobs from it (1 waiting)\n")


def test_json_is_valid_utf8_for_any_bytes(odd_names, redis_url):
    for args in (["queues"], ["stats"], ["jobs", "dead"], ["jobs", "queue:\udcff\udcfe"]):
        proc = subprocess.run([sys.executable, "-m", "queued.admin.ctl", "--redis", redis_url,
                               *args, "--json"], capture_output=True, env=ctl_env(), cwd=ROOT,
                              timeout=60)
        assert (proc.returncode, proc.stderr) == (0, b""), args
        text = proc.stdout.decode("utf-8")  # (strict: raw bytes that are not UTF-8 raise)
        doc = json.loads(text)
        if args == ["queues"]:
            # A byte that is not UTF-8 is written \udcXX (surrogateescape's code point)
            assert '"\\udcff\\udcfe"' in text
            assert [q["name"] for q in doc] == ["default", "\udcff\udcfe"]
            assert doc[1]["name"].encode("utf-8", "surrogateescape") == b"\xff\xfe"
        if args == ["jobs", "dead"]:
            assert doc["jobs"][0]["args"] == ["Hello \ud83d"]
        if args[0] == "jobs" and args[1].startswith("queue:"):
            assert [j["jid"] for j in doc["jobs"]] == ["a"]


def test_pause_of_an_ordinary_queue_beside_a_name_that_is_not_utf8(odd_names, redis_url):
    proc = ctl("pause", "default", url=redis_url)
    # (no live process serves it: paused, with the warning, exit 1; never a traceback)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == "paused queue default: workers take no more jobs from it (1 waiting)\n"
    assert odd_names.smembers("paused") == {b"default"}
    # and the odd one, named by its bytes on the command line, is paused too
    odd = ctl("pause", "\udcff\udcfe", url=redis_url)
    assert odd.returncode == 1 and odd.stdout == (
        'paused queue "\\xff\\xfe": workers take no more jobs from it (1 waiting)\n')
    assert odd_names.smembers("paused") == {b"default", b"\xff\xfe"}


def test_find_and_tasks_with_ids_that_are_not_utf8(odd_names, redis_url):
    nowhere = ctl("find", "\udcff", url=redis_url)
    assert nowhere.returncode == 1 and "Traceback" not in nowhere.stderr
    assert nowhere.stderr.startswith(r'queuedctl: no job "\xff" on ')
    found = ctl_json("find", "a", url=redis_url)
    assert [(p["where"], p["queue"]) for p in found["places"]] == [("queue", "\udcff\udcfe")]
    # A task whose id is not UTF-8 in the index (a producer in another language made it)
    odd_names.zadd("queued:tasks", {b"\xff": time.time()})
    odd_names.hset(b"queued:task:\xff", mapping={"description": "odd", "sealed": "1",
                                                 "created_at": str(time.time())})
    listed = rows(ok("tasks", url=redis_url))
    assert [(row[0], row[1]) for row in listed] == [(r'"\xff"', "odd")]
    assert [t["id"] for t in ctl_json("tasks", url=redis_url)] == ["\udcff"]
    one = ok("task", "\udcff", url=redis_url)
    assert one.splitlines()[:2] == ['task         "\\xff"', "description  odd"]


# --- 14. names shown unambiguously and addressed exactly ---------------------------------------

def test_names_that_differ_only_in_blanks_look_different(r, redis_url):
    for name in ("critical", "critical\n", " critical", "critical ", "", "a  b", '"q"'):
        r.sadd("queues", name)
        r.lpush(f"queue:{name}", json.dumps({"class": "X", "args": [], "jid": "j"}))
    shown = [row[0] for row in rows(ok("queues", url=redis_url))]
    assert sorted(shown) == sorted(['""', '" critical"', '"\\"q\\""', '"a \\x20b"',
                                    "critical", '"critical "', '"critical\\n"'])


@pytest.mark.parametrize("name", ["", " low", "low ", "a\nb"])
def test_any_queue_name_is_addressed_from_the_command_line(r, redis_url, name):
    r.sadd("queues", name, "low")
    r.lpush(f"queue:{name}", *[json.dumps({"class": "X", "args": [i], "jid": f"j{i}"})
                               for i in range(2)])
    r.lpush("queue:low", json.dumps({"class": "X", "args": [], "jid": "other"}))
    arg = f"queue:{name}"
    # pause, unpause, jobs, delete one, clear: each on that queue only
    assert ctl("pause", arg, "--force", url=redis_url).returncode == 0
    assert r.smembers("paused") == {name.encode()}
    assert [j["jid"] for j in ctl_json("jobs", arg, url=redis_url)["jobs"]] == ["j0", "j1"]
    assert ctl_json("delete", arg, "j0", url=redis_url)["done"] == 1
    assert ctl_json("clear", arg, "--yes", url=redis_url) == {"queue": name, "cleared": 1}
    assert r.llen(f"queue:{name}") == 0 and r.llen("queue:low") == 1
    assert ctl("unpause", arg, url=redis_url).returncode == 0 and not r.smembers("paused")
    if name:  # a name as it is (the shell's quotes keep its blanks) is the same queue
        assert ctl("pause", name, "--force", url=redis_url).returncode == 0
        assert r.smembers("paused") == {name.encode()}


def test_an_empty_queue_argument_is_refused_with_the_way_to_name_it(r, redis_url):
    # (an unset shell variable must not clear the queue with the empty name)
    r.sadd("queues", "")
    r.lpush("queue:", json.dumps({"class": "X", "args": [], "jid": "j"}))
    proc = ctl("clear", "", "--yes", url=redis_url)
    assert proc.returncode == 2 and "queue: (nothing after the colon)" in proc.stderr
    assert r.llen("queue:") == 1


#: Names a terminal shows alike (a zero-width space, a no-break space, a variation selector, a
#: combining accent for a precomposed letter, a C1 control beside a byte that is not UTF-8):
#: name -> what queuedctl shows.
LOOK_ALIKE = {"zw\u200bsp": r'"zw\u200bsp"', "zwsp": "zwsp", "nb\u00a0sp": r'"nb\u00a0sp"',
              "nb sp": "nb sp", "vs\ufe0f": r'"vs\ufe0f"', "vs": "vs",
              "cafe\u0301": r'"cafe\u0301"', "caf\u00e9": "caf\u00e9",
              "c1\u0085": r'"c1\u0085"', "c1\udc85": r'"c1\x85"'}


def test_names_that_a_terminal_shows_alike_look_different_in_every_listing(r, redis_url):
    # Given queues, process tags, a hang's class and dead jobs' error classes named so
    now = time.time()
    for name in LOOK_ALIKE:
        raw = name.encode("utf-8", "surrogateescape")
        r.sadd("queues", raw)
        r.lpush(b"queue:" + raw, json.dumps({"class": "X", "args": [], "jid": "j"}))
    for i, tag in enumerate(("t", "t ", "t\u200b")):
        r.sadd("processes", f"p{i}")
        r.hset(f"p{i}", mapping={
            "info": json.dumps({"hostname": "h", "pid": i, "identity": f"p{i}", "tag": tag,
                                "queues": ["zz"], "concurrency": 1, "started_at": now}),
            "beat": now, "busy": 0, "quiet": "false", "rss": 0,
            "hangs": json.dumps([{"worker": "w1", "pid": 7, "thread": 1, "class": f"C{tag}",
                                  "jid": "j", "over": 3}] if i == 1 else [])})
    for i, error_class in enumerate(("E", "E\u200b")):
        dead(r, f"d{i}", error=(error_class, "m"), at=now - i)
    # When they are listed, Then each reads as queuedctl shows a name, no two alike
    assert sorted(row[0] for row in rows(ok("queues", url=redis_url))) == \
        sorted(LOOK_ALIKE.values())
    listing = ctl("processes", url=redis_url)
    assert [row[1] for row in rows(listing.stdout)] == ["t", '"t "', r'"t\u200b"']
    assert listing.stderr == 'p1: worker w1 pid 7 thread 1: "Ct " jid=j is 3s past its timeout\n'
    assert [row[5] for row in rows(ok("jobs", "dead", url=redis_url))] == \
        ["E: m", r'"E\u200b": m']
