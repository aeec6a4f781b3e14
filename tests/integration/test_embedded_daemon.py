"""``embedded_redis:`` through the ``queued`` command: the master runs its own redis-server, a
child it reaps with the same ``waitpid(-1)`` as its workers. That child is never taken for a
worker; when it dies the master says so and starts it again (its data is in its directory);
a Ctrl-C in the terminal reaches the master and workers, not Redis, which the master stops
last, after putting the running jobs back."""
import json
import os
import re
import signal
import time

import jobs
import psutil
import pytest
import redis
import yaml
from faults.common import report
from harness import Daemon, counts, pid_alive, title, wait_for
from terminal import CTRL_C, TerminalDaemon

import queued


def embedded(cls, tmp_path, **settings):
    """A daemon of ``cls`` whose config says ``embedded_redis: redis`` (under tmp_path), not
    a redis_url; ``d.r`` and ``d.url`` reach that Redis once it runs."""
    d = cls("redis://unused", tmp_path, **settings)
    with open(d.config) as f:
        data = yaml.safe_load(f)
    del data["redis_url"]
    data["embedded_redis"] = "redis"
    with open(d.config, "w") as f:
        yaml.safe_dump(data, f)
    sock = os.path.join(str(tmp_path), "redis", "redis.sock")
    d.url = f"unix://{sock}?db=0"
    d.r = redis.Redis(unix_socket_path=sock, socket_timeout=5)
    return d


def workers(d) -> set[int]:
    return {p for p in d.worker_pids() if " worker " in title(p)}


def redis_pid(d, text) -> int:
    """The pid in the last log line of the daemon that contains ``text`` + pid."""
    return int(re.findall(re.escape(text) + r"(\d+)", d.output())[-1])


@pytest.fixture
def make(tmp_path):
    """``make(cls=Daemon, *flags, **settings)``: start a daemon on an embedded Redis, boot
    waited for; all are killed at teardown (the master's Redis goes with it: PDEATHSIG)."""
    made = []

    def start(cls=Daemon, *extra, concurrency=2, **settings):
        d = embedded(cls, tmp_path, concurrency=concurrency, **settings)
        made.append(d)
        d.start(*extra, wait=False)
        d.wait_log("queued 0.1.0 starting", 15)  # logged once its Redis answers
        wait_for(lambda: len(workers(d)) == concurrency and d.identity(), 15, what="boot")
        return d

    yield start
    for d in made:
        d.cleanup()


def test_an_embedded_redis_that_dies_is_started_again_by_the_master(make):
    # Given a daemon on its embedded Redis, serving jobs
    d = make()
    first = redis_pid(d, "embedded Redis pid=")
    assert psutil.Process(first).ppid() == d.pid  # the master's child, like its workers
    own = workers(d)
    client = queued.Client(url=d.url)
    before = client.push({"class": "Record", "args": ["before"]})
    wait_for(lambda: counts(d.r, jobs.DONE).get(before) == 1, 5, what="a job before")
    # When the redis-server is SIGKILLed
    os.kill(first, signal.SIGKILL)
    killed = time.monotonic()
    # Then the master says so (not taking it for a worker) and starts it again
    d.wait_log(f"embedded Redis (pid {first}) exited (killed by SIGKILL", 5)
    d.wait_log("embedded Redis started again: pid=", 10)
    restarted = time.monotonic() - killed
    second = redis_pid(d, "embedded Redis started again: pid=")
    assert second != first and psutil.Process(second).ppid() == d.pid
    # And the same workers serve the next job on it
    after = client.push({"class": "Record", "args": ["after"]})
    wait_for(lambda: counts(d.r, jobs.DONE).get(after) == 1, 10, what="a job after")
    served = time.monotonic() - killed
    assert workers(d) == own
    out = d.output()
    assert " died " not in out and "respawning" not in out and "Traceback" not in out
    # And at exit the master stops the Redis it started
    assert d.stop() == 0
    assert not pid_alive(second)
    report("the embedded_redis redis-server SIGKILLed under a running daemon (2 workers)",
           2, 2, 0, 0, f"the master logged it and started it again within "
           f"{restarted * 1000:.0f} ms (on the same directory); the next job ran "
           f"{served * 1000:.0f} ms after the kill; no worker replaced")


def test_ctrl_c_in_the_terminal_puts_jobs_back_before_the_master_stops_its_redis(make):
    # Given a daemon in a terminal (-t 1) on its embedded Redis, running two long jobs
    d = make(TerminalDaemon, "-t", "1")
    server = redis_pid(d, "embedded Redis pid=")
    jids = [queued.Client(url=d.url).push({"class": "SlowFirst", "args": [30, i]})
            for i in range(2)]
    wait_for(lambda: set(counts(d.r, jobs.RUNS)) == set(jids), 10, what="both jobs running")
    assert os.getpgid(server) != d.foreground_group()  # Redis is out of the terminal's reach
    # When Ctrl-C is typed (the master and its workers get SIGINT)
    d.type(CTRL_C)
    # Then at the deadline the jobs go back to their queue, and only then is Redis stopped
    # (TERM: it saves); the master exits 0 and leaves no redis-server behind
    assert d.wait(10) == 0
    assert sum(int(n) for n in re.findall(r"(\d+) job\(s\) put back", d.output())) == 2
    wait_for(lambda: not pid_alive(server), 5, what="the embedded Redis to exit")
    with open(os.path.join(os.path.dirname(d.config), "redis", "redis.log")) as f:
        redis_log = f.read()
    assert "Received SIGTERM" in redis_log and "Received SIGINT" not in redis_log
    # And the next daemon on the same directory runs them (their second run is quick)
    d2 = make()
    wait_for(lambda: counts(d2.r, jobs.DONE) == {j: 1 for j in jids}, 10, what="the jobs")
    assert counts(d2.r, jobs.RUNS) == {j: 2 for j in jids}
    queued_now = [json.loads(p)["jid"] for p in d2.r.lrange("queue:default", 0, -1)]
    assert queued_now == []
    assert d2.stop() == 0
