"""``queuedctl`` run as a real subprocess against a real Redis: every command's table and JSON,
its exit status (0 done, 1 unhealthy or absent, 2 usage or config, 3 Redis unreachable), where
it finds Redis, confirmations, progress bars on a terminal, and life without rich.
(With real daemons: tests/integration/test_ctl_daemons.py; with Ruby's Sidekiq:
tests/interop/test_ctl_sidekiq.py.)"""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import time

import pytest

from ctlrun import box_rows, columns, ctl, ctl_env, ctl_json, ok, rows
from harness import ROOT, wait_for

NOW = time.time()  # each test's own "now" (set_now), for the payloads' times
IDENTITY = "web-1:4721:0f3a9c2b1d4e"


def job(i, queue="default", klass="HardJob", **extra) -> str:
    msg = {"retry": True, "queue": queue, "class": klass, "args": [i, "bob"],
           "jid": f"{i:024x}", "created_at": NOW - 600, "enqueued_at": NOW - 30 - i}
    msg.update(extra)
    return json.dumps(msg)


def failed(i, klass="Billing::InvoiceJob", message="card declined", **extra) -> str:
    return job(i, klass=klass, error_class="RuntimeError", error_message=f"{message} {i}",
               retry_count=3, failed_at=NOW - 100, **extra)


def jid(i) -> str:
    return f"{i:024x}"


def a_process(r, identity=IDENTITY, busy=1, quiet="false", beat=None, queues=("default", "low"),
              hostname="web-1", **info):
    r.sadd("processes", identity)
    r.hset(identity, mapping={
        "info": json.dumps({"hostname": hostname, "pid": 4721, "started_at": NOW - 7200,
                            "tag": "app", "concurrency": 4, "queues": list(queues),
                            "labels": ["blue"], "identity": identity, **info}),
        "busy": str(busy), "beat": repr(NOW - 2 if beat is None else beat), "quiet": quiet,
        "rss": "41234", "rtt_us": "90"})


@pytest.fixture(autouse=True)
def set_now():
    global NOW
    NOW = time.time()


@pytest.fixture
def full(r):
    """A Redis as an operator finds it: two queues, one job of each set kind, counters, one
    process running one job."""
    r.set("stat:processed", 1234)
    r.set("stat:failed", 56)
    r.sadd("queues", "default", "low")
    r.lpush("queue:default", *[job(i) for i in range(3)])
    r.lpush("queue:low", job(10, "low", klass="ActiveJob::QueueAdapters::SidekiqAdapter::"
                                              "JobWrapper", wrapped="ReportJob"))
    r.zadd("schedule", {job(20, klass="Later"): NOW + 300})
    r.zadd("retry", {failed(30, klass="HardJob", message="read timed out"): NOW + 150})
    r.zadd("dead", {failed(40 + i): NOW - 3600 * (i + 1) for i in range(3)})
    a_process(r)
    r.hset(f"{IDENTITY}:workers", "w0", json.dumps(
        {"queue": "default", "payload": json.loads(job(99)), "run_at": int(NOW - 12)}))
    return r


# --- stats, queues, history -------------------------------------------------------------------

def pairs(text: str) -> list[list[str]]:
    """The name/value lines a plain ``stats`` starts with (up to the blank line)."""
    head = text.split("\n\n")[0]
    return [re.split(r"\s{2,}", line) for line in head.splitlines()]


def test_stats_as_a_table_and_as_json(full, redis_url):
    a_process(full, "web-2:99:aa", busy=2)
    said = ok("stats", url=redis_url)
    assert pairs(said)[:8] == [
        ["Processed", "1,234"], ["Failed", "56"], ["Enqueued", "4"], ["Scheduled", "1"],
        ["Retries", "1"], ["Dead", "3"], ["Processes", "2"], ["Busy", "3"]]
    queues = said.split("\n\n")[1]
    assert columns(queues) == ["Queue", "Size", "Latency", "Paused"]
    (default,) = [row for row in rows(queues) if row[0] == "default"]
    assert default[:2] == ["default", "3"] and default[2].endswith(" s")
    # on a terminal: rich tables, under the Redis they came from
    status, table = in_terminal(["stats"], b"", redis_url)
    assert status == 0 and f"queued on {redis_url}" in table
    assert box_rows(table)[:2] == [["Processed", "1,234"], ["Failed", "56"]]
    doc = ctl_json("stats", url=redis_url)
    latency = {name: q.pop("latency") for name, q in doc["queues"].items()}
    assert latency == {"default": pytest.approx(time.time() - NOW + 32, abs=5),
                       "low": pytest.approx(time.time() - NOW + 40, abs=5)}
    assert doc.pop("default_latency") == pytest.approx(latency["default"], abs=2)
    assert abs(doc.pop("time") - time.time()) < 30
    assert doc == {"processed": 1234, "failed": 56, "enqueued": 4, "scheduled": 1,
                   "retries": 1, "dead": 3, "processes": 2, "busy": 3,
                   "expired": 0, "overlimit": 0, "unique_dropped": 0, "unique_deferred": 0,
                   "queues": {"default": {"size": 3, "paused": False},
                              "low": {"size": 1, "paused": False}}}


def test_queues_pause_and_unpause(r, full, redis_url):
    assert ok("pause", "low", url=redis_url) == (
        "paused queue low: workers take no more jobs from it (1 waiting)\n")
    assert r.smembers("paused") == {b"low"}
    assert ok("pause", "low", url=redis_url) == "queue low was already paused\n"
    assert ctl_json("pause", "empty", "--force", url=redis_url) == {
        "queue": "empty", "paused": True, "changed": True, "size": 0}
    table = rows(ok("queues", url=redis_url))
    assert [(row[0], row[1], row[3]) for row in table] == [
        ("default", "3", ""), ("empty", "0", "paused"), ("low", "1", "paused")]
    listed = ctl_json("queues", url=redis_url)
    assert [(q["name"], q["size"], q["paused"]) for q in listed] == [
        ("default", 3, False), ("empty", 0, True), ("low", 1, True)]
    assert ok("unpause", "low", url=redis_url).startswith("unpaused queue low")
    assert r.smembers("paused") == {b"empty"}


def test_history_per_day(r, redis_url):
    today = time.strftime("%Y-%m-%d", time.gmtime())
    r.set(f"stat:processed:{today}", 7)
    r.set(f"stat:failed:{today}", 2)
    assert ctl_json("history", "--days", "2", url=redis_url)[0] == {
        "date": today, "processed": 7, "failed": 2}
    assert rows(ok("history", "--days", "1", url=redis_url)) == [[today, "7", "2"]]


# --- clear ------------------------------------------------------------------------------------

def test_clear_needs_yes_off_a_terminal_and_says_what_it_did(r, full, redis_url):
    refused = ctl("clear", "default", url=redis_url)
    assert refused.returncode == 2 and "needs --yes when stdin is not a terminal" in \
        refused.stderr and r.llen("queue:default") == 3
    assert ok("clear", "default", "--yes", url=redis_url) == (
        "cleared queue default: 3 jobs deleted\n")
    assert r.llen("queue:default") == 0 and r.smembers("queues") == {b"low"}
    absent = ctl("clear", "default", "--yes", url=redis_url)
    assert (absent.returncode, absent.stdout) == (1, "")
    assert absent.stderr == "queuedctl: no queue named default (queuedctl queues lists them)\n"
    assert ctl_json("clear", "low", "--yes", url=redis_url) == {"queue": "low", "cleared": 1}


def in_terminal(args, answer: bytes, url: str) -> tuple[int, str]:
    """Run queuedctl with stdin, stdout and stderr on a pseudo-terminal, type ``answer``
    once it asks; (exit status, everything it wrote)."""
    master, slave = pty.openpty()
    argv = [sys.executable, "-m", "queued.admin.ctl", "--redis", url, *args]
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=ctl_env(),
                            cwd=ROOT)
    os.close(slave)
    seen = b""

    def read_until(text: bytes) -> bool:
        nonlocal seen
        try:
            seen += os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            return True
        return text in seen

    if answer:
        wait_for(lambda: read_until(b"[y/N]"), 30, what="the question")
        os.write(master, answer)
    status = proc.wait(60)
    while not read_until(b"\0"):
        pass
    os.close(master)
    # without the terminal's colours and cursor moves
    return status, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode("utf-8", "replace"))


def test_clear_asks_on_a_terminal(r, full, redis_url):
    status, said = in_terminal(["clear", "default"], b"n\n", redis_url)
    assert status == 1 and "Delete the 3 jobs of queue default? [y/N]" in said
    assert "not confirmed; nothing was done" in said and r.llen("queue:default") == 3
    status, said = in_terminal(["clear", "default"], b"y\n", redis_url)
    assert status == 0 and "cleared queue default: 3 jobs deleted" in said
    assert r.llen("queue:default") == 0


# --- jobs ---------------------------------------------------------------------------------------

def test_jobs_of_each_set_as_tables(full, redis_url):
    dead = rows(ok("jobs", "dead", url=redis_url))
    assert [(row[0], row[1], row[2], row[4], row[5]) for row in dead] == [
        ("1h ago", jid(40), "Billing::InvoiceJob", '[40,"bob"]',
         "RuntimeError: card declined 40"),
        ("2h ago", jid(41), "Billing::InvoiceJob", '[41,"bob"]',
         "RuntimeError: card declined 41"),
        ("3h ago", jid(42), "Billing::InvoiceJob", '[42,"bob"]',
         "RuntimeError: card declined 42")]
    (retry,) = rows(ok("jobs", "retry", url=redis_url))
    assert retry == ["in 2m", jid(30), "HardJob", "default", '[30,"bob"]', "3",
                     "RuntimeError: read timed out 30"]
    (scheduled,) = rows(ok("jobs", "scheduled", url=redis_url))
    assert scheduled == ["in 4m", jid(20), "Later", "default", '[20,"bob"]']
    queue = rows(ok("jobs", "queue:default", url=redis_url))
    assert [row[:3] for row in queue] == [["1", jid(0), "HardJob"], ["2", jid(1), "HardJob"],
                                          ["3", jid(2), "HardJob"]]
    assert queue[0][4].endswith("s ago")
    # ActiveJob's wrapped class is the class shown
    low = ok("jobs", "queue:low", url=redis_url)
    assert rows(low)[0][2] == "ReportJob"


def test_jobs_filters_limit_and_json(r, redis_url):
    r.zadd("dead", {failed(i, klass="A" if i % 2 else "B",
                           message="Timeout" if i % 3 == 0 else "nope"): NOW - i
                    for i in range(60)})
    doc = ctl_json("jobs", "dead", "--class", "A", "--error", "timeout", url=redis_url)
    assert (doc["set"], doc["size"], doc["matched"]) == ("dead", 60, 10)
    # the latest death first, every match's payload as stored
    assert [j["jid"] for j in doc["jobs"]] == [jid(i) for i in range(3, 60, 6)]
    first = doc["jobs"][0]
    assert (first["class"], first["queue"], first["args"], first["error_class"],
            first["retry_count"], first["source"]) == (
        "A", "default", [3, "bob"], "RuntimeError", 3, "dead")
    assert first["score"] == pytest.approx(NOW - 3) and first["payload"]["jid"] == jid(3)
    # off a terminal the rows alone are on stdout; that some were left out, on stderr
    limited = ctl("jobs", "dead", "--class", "A", "--limit", "2", url=redis_url)
    assert [row[1] for row in rows(limited.stdout)] == [jid(1), jid(3)]
    assert limited.stderr == ("queuedctl: 2 of 30 matching, 60 in dead (--limit N shows "
                              "more, 0 all)\n")
    assert len(ctl_json("jobs", "dead", "--limit", "0", url=redis_url)["jobs"]) == 60
    assert [j["jid"] for j in ctl_json("jobs", "dead", "--arg", '[7,"b', url=redis_url)
            ["jobs"]] == [jid(7)]
    assert [j["jid"] for j in ctl_json("jobs", "dead", "--jid", jid(8), "--jid", jid(9),
                                       url=redis_url)["jobs"]] == [jid(8), jid(9)]


# --- retry, delete, kill ----------------------------------------------------------------------

def test_retry_by_jid_and_a_missing_jid(r, full, redis_url):
    proc = ctl("retry", "dead", jid(41), "f" * 24, url=redis_url)
    assert proc.returncode == 1
    assert proc.stdout == "1 job retried (enqueued now) from dead\n"
    assert proc.stderr == f"queuedctl: not found in dead: {'f' * 24}\n"
    assert [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, 0)] == [jid(41)]
    assert r.zcard("dead") == 2
    doc = ctl_json("retry", "scheduled", jid(20), url=redis_url)
    assert doc == {"action": "retry", "set": "scheduled", "done": 1, "not_found": [],
                   "left": []}  # (left: the jobs a retry leaves, with why: F4 #3)
    assert r.zcard("schedule") == 0


def test_a_filter_narrows_the_jids_named(r, full, redis_url):
    doc = ctl_json("delete", "dead", "--error", "declined 42", jid(41), jid(42),
                   url=redis_url, status=1)
    assert doc == {"action": "delete", "set": "dead", "done": 1, "not_found": [jid(41)]}
    assert sorted(json.loads(m)["jid"] for m in r.zrange("dead", 0, -1)) == [jid(40), jid(41)]


def test_retry_kill_and_delete_every_match(r, redis_url):
    r.zadd("retry", {failed(i, klass="A" if i < 30 else "B"): NOW + i for i in range(100)})
    assert ok("kill", "retry", "--class", "A", "--all", "--yes", url=redis_url) == (
        "30 jobs killed (moved to dead) from retry\n")
    assert r.zcard("retry") == 70 and r.zcard("dead") == 30
    assert ctl_json("retry", "dead", "--arg", "[1", "--all", "-y", url=redis_url)["done"] == 11
    assert r.llen("queue:default") == 11  # 1 and 10..19
    assert ok("delete", "retry", "--all", "--yes", url=redis_url) == (
        "70 jobs deleted from retry\n")
    assert r.zcard("retry") == 0


def test_delete_from_a_queue(r, full, redis_url):
    assert ok("delete", "queue:default", jid(1), url=redis_url) == (
        "1 job deleted from queue:default\n")
    assert [json.loads(m)["jid"] for m in r.lrange("queue:default", 0, -1)] == [jid(2), jid(0)]
    assert ok("delete", "queue:low", "--class", "ReportJob", "--all", "--yes",
              url=redis_url) == (
        "1 job deleted from queue:low\n")


@pytest.mark.parametrize("args, message", [
    (["retry", "dead"], "give the jobs' JIDs, or --all"),
    (["retry", "dead", "--all", jid(1)], "give the jobs' JIDs or --all, not both"),
    (["retry", "dead", "--class", "X", jid(1), "--bogus"], "unrecognized arguments: 0"),
    (["stats", "extra"], "unrecognized arguments: extra"),
    (["retry", "queue:default", "--all"], "a queue's jobs are waiting to run already"),
    (["kill", "dead", "--all"], "dead jobs are dead already"),
    (["jobs", "deadd"], "'deadd' is not a set: give queue:NAME, scheduled, retry or dead"),
    (["jobs", "dead", "--limit", "-1"], "'-1' is not a positive whole number"),
    (["quiet"], "give a process's IDENTITY, or --all"),
    ([], "the following arguments are required: COMMAND"),
])
def test_usage_errors_exit_2_and_change_nothing(r, full, redis_url, args, message):
    before = r.zcard("dead"), r.llen("queue:default")
    proc = ctl(*args, url=redis_url)
    assert proc.returncode == 2 and proc.stdout == ""
    assert message in proc.stderr and "usage: queuedctl" in proc.stderr
    assert (r.zcard("dead"), r.llen("queue:default")) == before


def test_a_bulk_action_draws_a_progress_bar_on_a_terminal_only(r, redis_url):
    r.zadd("dead", {failed(i): NOW - i for i in range(3000)})
    proc = ctl("retry", "dead", "--class", "Billing::InvoiceJob", "--all", "--yes",
               url=redis_url)
    assert (proc.stdout, proc.stderr) == ("3,000 jobs retried (enqueued now) from dead\n", "")
    r.zadd("dead", {failed(i): NOW - i for i in range(3000, 6000)})
    status, said = in_terminal(["retry", "dead", "--all"], b"y\n", redis_url)
    assert status == 0 and "3,000 jobs retried" in said
    assert "retry dead" in said and "3000/3000 examined, 3000 acted on" in said


# --- processes, running, signals, ping --------------------------------------------------------

def test_processes_and_running(r, full, redis_url):
    a_process(r, "web-2:99:aa", busy=0, quiet="true", queues=("low",), hostname="web-2")
    table = rows(ok("processes", url=redis_url))
    beats = [row.pop(7) for row in table]
    assert table and all(b.endswith("s ago") for b in beats)
    assert table == [
        [IDENTITY, "app", "2h ago", "default, low", "1/4", "1", "running", "40 MB"],
        ["web-2:99:aa", "app", "2h ago", "low", "0/4", "0", "quiet", "40 MB"]]
    status, drawn = in_terminal(["processes"], b"", redis_url)
    assert status == 0 and "2 processes, 1 of 8 busy" in drawn
    (first, second) = ctl_json("processes", url=redis_url)
    assert first == {"identity": IDENTITY, "hostname": "web-1", "pid": 4721, "tag": "app",
                     "version": "", "started_at": pytest.approx(NOW - 7200),
                     "concurrency": 4, "busy": 1, "queues": ["default", "low"],
                     "quiet": False, "beat": pytest.approx(NOW - 2), "rss_kb": 41234,
                     "rtt_us": 90, "labels": ["blue"], "reserved": 1, "threads": 4,
                     "processes": 1, "hangs": []}
    assert second["quiet"] is True
    # (a record without queued's worker and pid: Sidekiq's thread id, its process's pid)
    (running,) = rows(ok("running", url=redis_url))
    assert running[:7] == [IDENTITY, "4721", "w0", jid(99), "default", "HardJob",
                           '[99,"bob"]']
    assert running[7].endswith("s ago")
    (work,) = ctl_json("workers", url=redis_url)
    assert (work["identity"], work["jid"], work["queue"], work["run_at"], work["worker"],
            work["pid"]) == (IDENTITY, jid(99), "default", int(NOW - 12), "w0", 4721)


def test_processes_shows_what_a_threaded_process_holds_and_its_hangs(r, redis_url):
    # Given a master of 2 processes x 25 threads running 3 jobs, holding 4, and reporting a
    # stuck event loop and a job past its time limit (heartbeat.hangs)
    a_process(r, busy=3, concurrency=50, processes=2, threads=25)
    r.hset(IDENTITY, mapping={"reserved": "4", "hangs": json.dumps([
        {"worker": 1, "pid": 77, "loop_lag": 3.2, "jid": "j" * 24},
        {"worker": 0, "pid": 76, "thread": 5, "jid": "k" * 24, "class": "Slow", "over": 2.5}])})
    # Then processes shows busy of jobs at once, what it holds, and names each hang (off a
    # terminal on stderr: stdout keeps one line per process)
    proc = ctl("processes", url=redis_url)
    (row,) = rows(proc.stdout)
    assert proc.returncode == 0 and row[4:6] == ["3/50", "4"]
    assert proc.stderr.splitlines() == [
        f"{IDENTITY}: worker 1 pid 77: its event loop has not run for 3.2s, stuck in job "
        f"{'j' * 24}",
        f"{IDENTITY}: worker 0 pid 76 thread 5: Slow jid={'k' * 24} is 2.5s past its timeout"]
    status, drawn = in_terminal(["processes"], b"", redis_url)  # (a person's: below the table)
    assert status == 0 and "thread 5: Slow jid=" in drawn
    (p,) = ctl_json("processes", url=redis_url)
    assert (p["busy"], p["reserved"], p["concurrency"], p["threads"], p["processes"]) == (
        3, 4, 50, 25, 2)
    assert [h["worker"] for h in p["hangs"]] == [1, 0]


def test_quiet_stop_and_dump_push_sidekiqs_remote_signals(r, full, redis_url):
    a_process(r, "web-2:99:aa")
    assert ok("quiet", "web-1", url=redis_url) == (
        f"TSTP sent to {IDENTITY}: it goes quiet (takes no new jobs) at its next heartbeat\n")
    assert ctl_json("stop", IDENTITY, url=redis_url) == {"signal": "TERM",
                                                         "processes": [IDENTITY]}
    assert ctl_json("dump", "--all", url=redis_url) == {
        "signal": "TTIN", "processes": [IDENTITY, "web-2:99:aa"]}
    assert r.lrange(f"{IDENTITY}-signals", 0, -1) == [b"TTIN", b"TERM", b"TSTP"]
    assert r.lrange("web-2:99:aa-signals", 0, -1) == [b"TTIN"]
    ambiguous = ctl("quiet", "web-", url=redis_url)
    assert ambiguous.returncode == 2 and "could be any of" in ambiguous.stderr
    absent = ctl("stop", "web-9", url=redis_url)
    assert (absent.returncode, absent.stderr) == (
        1, "queuedctl: no live process web-9 (queuedctl processes lists them)\n")
    r.delete(IDENTITY, "web-2:99:aa")
    assert ctl("quiet", "--all", url=redis_url).returncode == 1


def ping(url, *args) -> tuple[int, str, str]:
    proc = ctl("ping", *args, url=url)
    return proc.returncode, proc.stdout, proc.stderr


def test_ping(r, redis_url):
    assert ping(redis_url) == (0, "", "")
    assert ping(redis_url, "--queue", "default") == (
        1, "", "queuedctl: no live process serving queue default\n")
    a_process(r, quiet="true")
    assert ping(redis_url, "--queue", "default") == (
        1, "", f"queuedctl: every process serving queue default is quiet ({IDENTITY})\n")
    # (its beat 45 s before the call: the test's NOW is seconds old by now on a loaded box,
    # where "has beaten for 4" read "50 s")
    before = time.time()
    a_process(r, "web-1:5:bb", beat=before - 45)
    code, _, said = ping(redis_url, "--queue", "default")
    age = re.fullmatch(r"queuedctl: no process serving queue default has beaten for (\d+) s "
                       r"\(--max-age 30 s\)\n", said)
    assert code == 1 and age and 45 <= int(age[1]) <= 46 + time.time() - before, said
    assert ping(redis_url, "--queue", "default", "--max-age", "600") == (0, "", "")
    assert ping(redis_url, "--queue", "other", "--max-age", "600")[0] == 1
    # --local: only this host's processes count
    assert ping(redis_url, "--local", "--max-age", "600")[0] == 1
    a_process(r, "here:1:cc", hostname=os.environ.get("DYNO") or os.uname().nodename)
    assert ping(redis_url, "--local", "--queue", "low") == (0, "", "")


# --- Redis, config, rich, help ----------------------------------------------------------------

@pytest.mark.parametrize("args", [["stats"], ["stats", "--json"], ["ping"], ["jobs", "dead"],
                                  ["retry", "dead", "--all"], ["processes", "--json"]])
def test_an_unreachable_redis_is_exit_3_and_one_line(args):
    from conftest import free_port
    url = f"redis://127.0.0.1:{free_port()}/0"
    proc = ctl(*args, "--timeout", "2", url=url)
    assert (proc.returncode, proc.stdout) == (3, "")
    assert proc.stderr.startswith(f"queuedctl: Redis at {url} is unreachable: ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_where_redis_comes_from(r, redis_url, tmp_path):
    # The daemon's rule (config.choose_redis): --redis, else $REDIS_URL, else the file's
    # redis_url, else the default; the namespace from --namespace, else the file
    from conftest import free_port
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    r.set("ns:stat:processed", 5)
    r.set("prod:stat:processed", 6)
    r.set("stat:processed", 7)
    conf = tmp_path / "sidekiq.yml"
    conf.write_text(f"redis_url: {redis_url}\nnamespace: ns\nproduction:\n  namespace: prod\n")
    # -C: the file's Redis and namespace; -e picks a section
    assert ctl_json("stats", "-C", str(conf))["processed"] == 5
    assert ctl_json("-C", str(conf), "-e", "production", "stats")["processed"] == 6
    assert ctl_json("stats", "-C", str(conf), "--namespace", "")["processed"] == 5
    # $REDIS_URL wins over the file's URL (as for the daemon), the file's namespace kept
    assert ctl(*"stats --json --timeout 2 -C".split(), str(conf),
               env={"REDIS_URL": nowhere}).returncode == 3
    bad_file = tmp_path / "elsewhere.yml"
    bad_file.write_text(f"redis_url: {nowhere}\nnamespace: ns\n")
    assert ctl_json("stats", "-C", str(bad_file), env={"REDIS_URL": redis_url})[
        "processed"] == 5
    # --redis (or --redis-url) wins over both
    assert ctl(*"stats --json --timeout 2 -C".split(), str(conf), url=nowhere,
               env={"REDIS_URL": redis_url}).returncode == 3
    assert ctl_json("stats", "--redis-url", redis_url, "-C", str(bad_file),
                    env={"REDIS_URL": nowhere})["processed"] == 5
    # a file naming no Redis: $REDIS_URL; no file: $REDIS_URL
    bare = tmp_path / "bare.yml"
    bare.write_text("concurrency: 2\n")
    assert ctl_json("stats", "-C", str(bare), env={"REDIS_URL": redis_url})["processed"] == 7
    assert ctl_json("stats", env={"REDIS_URL": redis_url})["processed"] == 7
    # without -C, config/sidekiq.yml in the working directory, as for queued
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "sidekiq.yml").write_text(f"redis_url: {redis_url}\n"
                                                     "namespace: ns\n")
    assert ctl_json("stats", cwd=str(tmp_path))["processed"] == 5


def test_queuedctl_and_the_daemon_given_the_same_options_pick_the_same_redis(tmp_path, monkeypatch):
    # Every combination of flag, environment and file gives both the same URL and namespace,
    # each read from its own command line by its own parser (queued -C F --redis-url U as
    # cli.py parses it; queuedctl -C F --redis U stats)
    from queued import config
    from queued.admin import ctl
    monkeypatch.chdir(tmp_path)
    files = {"none": None, "url": "redis_url: redis://file:6379/1\nnamespace: f\n",
             "bare": "namespace: b\n", "redis": "redis: {url: 'redis://map:6379/2'}\n"}
    for label, text in files.items():
        path = None
        if text is not None:
            path = tmp_path / f"{label}.yml"
            path.write_text(text)
        for flag in (None, "redis://flag:6379/3"):
            for env in ({}, {"REDIS_URL": "redis://env:6379/4"}):
                given = ["-C", str(path)] if path else []
                daemon_cfg = config.load(given + (["--redis-url", flag] if flag else []),
                                         environ=env)
                ctl_target = ctl.redis_target(ctl.build_parser().parse_args(
                    given + (["--redis", flag] if flag else []) + ["stats"]), env)
                assert (ctl_target.url, ctl_target.namespace) == (
                    daemon_cfg.redis_url, daemon_cfg.namespace), (label, flag, env)


@pytest.mark.parametrize("content, message", [
    ("bogus_key: 1\n", "unknown key 'bogus_key'"),
    ("redis_url: http://x\n", "redis_url"),
    (None, "cannot read config file"),
])
def test_a_bad_config_is_exit_2_and_one_line(tmp_path, content, message):
    conf = tmp_path / "sidekiq.yml"
    if content is not None:
        conf.write_text(content)
    proc = ctl("stats", "-C", str(conf))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.startswith(f"queuedctl: {conf}: ") and message in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_without_rich_only_terminal_tables_need_it(full, redis_url, tmp_path):
    # A rich that cannot be imported shadows the installed one
    (tmp_path / "rich").mkdir()
    (tmp_path / "rich" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = {"PYTHONPATH": os.pathsep.join((str(tmp_path), ROOT))}
    for args in (["stats"], ["jobs", "dead"], ["processes"]):
        proc = ctl(*args, "--format", "table", url=redis_url, env=env)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == ("queuedctl: tables need rich: pip install 'queued-jobs[admin]' "
                               "(or use --json)\n")
    # off a terminal (plain, tsv, json) nothing needs it
    assert [row[1] for row in rows(ok("jobs", "dead", url=redis_url, env=env))] == [
        jid(40), jid(41), jid(42)]
    assert ok("processes", "--format", "tsv", url=redis_url, env=env).startswith("Identity\t")
    assert ctl_json("stats", url=redis_url, env=env)["dead"] == 3
    assert ctl("ping", url=redis_url, env=env).returncode == 0
    assert ok("pause", "low", "--force", url=redis_url, env=env).startswith(
        "paused queue low")
    assert ok("retry", "dead", "--all", "--yes", url=redis_url, env=env) == (
        "3 jobs retried (enqueued now) from dead\n")


def test_help_teaches_each_command(redis_url):
    from queued.admin.ctl import COMMANDS
    main = ok("--help")
    for spec in COMMANDS:
        assert f"    {spec.name}" in main
        text = ok(spec.name, "--help")
        assert text.startswith(f"usage: queuedctl {spec.name}")
        assert "example" in text and "--redis URL" in text
    assert ok("version") == ok("--version")


def test_a_reader_that_leaves_early_gets_no_traceback(r, redis_url):
    r.zadd("dead", {failed(i): NOW - i for i in range(5000)})
    argv = [sys.executable, "-m", "queued.admin.ctl", "--redis", redis_url, "jobs", "dead",
            "--limit", "0", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=ctl_env(), cwd=ROOT)
    proc.stdout.read(100)
    proc.stdout.close()
    assert proc.wait(60) == 0 and proc.stderr.read() == b""


def test_the_console_script_and_an_embedded_redis_socket(redis_server, tmp_path):
    # Given a redis-server listening only on the socket embedded_redis: DIR gives the master
    # (DIR/redis.sock) and a config naming DIR
    from conftest import find_redis_server
    sock = tmp_path / "redis.sock"
    server = subprocess.Popen([find_redis_server(), "--port", "0", "--unixsocket", str(sock),
                               "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(sock.exists, 10, what="the socket")
        conf = tmp_path / "sidekiq.yml"
        conf.write_text(f"embedded_redis: {tmp_path}\n")
        # When the queuedctl that setup.cfg installs (its entry point, run as pip writes it)
        # is given that config
        import configparser
        cfg = configparser.ConfigParser()
        cfg.read(os.path.join(ROOT, "setup.cfg"))
        entry = dict(line.split(" = ") for line in
                     cfg["options.entry_points"]["console_scripts"].strip().splitlines())
        module, function = entry["queuedctl"].split(":")
        script = tmp_path / "queuedctl"
        script.write_text(f"import sys\nfrom {module} import {function}\n"
                          f"sys.exit({function}())\n")
        proc = subprocess.run([sys.executable, str(script), "-C", str(conf), "stats", "--json"],
                              capture_output=True, text=True, env=ctl_env(), cwd=tmp_path,
                              timeout=60)
        # Then it reads that Redis
        assert (proc.returncode, proc.stderr) == (0, "")
        assert json.loads(proc.stdout)["processed"] == 0
    finally:
        server.terminate()
        server.wait(10)


def test_job_text_is_shown_as_it_is_and_ids_are_never_cut(r, redis_url):
    # Given a dead job whose class, arguments and error look like rich's markup
    r.zadd("dead", {failed(1, message="[bold]boom[/bold]", args=[True, "[red]x"],
                           klass="[i]Cls"): NOW - 5})
    # Then they are printed as they are, off a terminal and in a table
    (row,) = rows(ok("jobs", "dead", url=redis_url))
    assert row[1:5] == [jid(1), "[i]Cls", "default", '[true,"[red]x"]']
    assert row[5] == "RuntimeError: [bold]boom[/bold] 1"
    (drawn,) = box_rows(ok("jobs", "dead", "--format", "table", url=redis_url))
    assert drawn[1:] == row[1:]
    # And in a table too narrow for every cell, the jid stays whole on its line, and the
    # others wrap within the width (nothing cropped off the right side)
    narrow = ok("jobs", "dead", "--format", "table", url=redis_url, env={"COLUMNS": "50"})
    assert jid(1) in narrow
    drawn = narrow.splitlines()[1:-1]  # (less the title and the caption)
    assert drawn and all(len(line) <= 50 and line[-1] in "┓┃┩│┘" for line in drawn)
