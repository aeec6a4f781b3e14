"""Helpers shared by the fault tests: counting runs, the report line, private Redis servers."""
from __future__ import annotations

import collections
import os
import signal
import time

import redis

from . import faultjobs

from conftest import RedisServer, find_redis_server

JOBS = ("faults/faultjobs.py",)


def per_jid(r, key) -> collections.Counter:
    """How many runs each jid started (STARTS) or finished (ENDS)."""
    return collections.Counter(m.decode().split(":")[0] for m in r.smembers(key))


class Tally:
    """What happened to a set of jids: finished, lost, started more than once."""

    def __init__(self, r, jids):
        self.jids = set(jids)
        starts, ends = per_jid(r, faultjobs.STARTS), per_jid(r, faultjobs.ENDS)
        self.run = {j for j in self.jids if ends[j] >= 1}
        self.lost = self.jids - self.run
        self.twice = {j for j in self.jids if starts[j] > 1}
        self.extra_runs = sum(starts[j] - 1 for j in self.twice)


def done_count(r) -> int:
    return r.scard(faultjobs.DONE)


def held(r) -> int:
    """Jobs some worker slot holds (reserved zsets and landing lists)."""
    return (sum(r.zcard(k) for k in r.keys("queued:reserved:*"))
            + sum(r.llen(k) for k in r.keys("queued:landing:*")))


def queued_jobs(r) -> int:
    return sum(r.llen(k) for k in r.keys("queue:*") if r.type(k) == b"list")


def all_workers(d, n: int) -> set[int]:
    """The pids of the daemon's workers once all ``n`` have started (Daemon.workers_up)."""
    from harness import wait_for
    return set(wait_for(lambda: len(d.workers_up()) == n and d.workers_up(), 15,
                        what=f"{n} workers up"))


def log_lines(output: str, text: str, tid: str | None = None) -> list[str]:
    """The daemon's log lines containing ``text`` (and written by ``tid``, e.g. master, w0)."""
    return [x for x in output.splitlines()
            if text in x and (tid is None or f" tid={tid} " in x)]


def report(what: str, jobs_in, jobs_run, lost, twice, recovery: str) -> None:
    """One row of docs/reliability.md, printed to stdout (run pytest with -s to see it)."""
    print(f"\n| {what} | {jobs_in} | {jobs_run} | {lost} | {twice} | {recovery} |", flush=True)


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5)


class OwnRedis(RedisServer):
    """A private redis-server with persistence that can be stopped and started again on the
    same port and directory (RedisServer.stop() removes the directory)."""

    def __init__(self, *extra: str, persist: bool = True):
        durable = ("--appendonly", "yes", "--appendfsync", "always") if persist else ()
        super().__init__(find_redis_server(), (*durable, *extra))

    def shutdown(self) -> None:
        """SIGTERM: Redis writes its data and exits; the directory stays."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(15)

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.thaw()
        super().stop()


def first_progress(r, timeout=30.0) -> float:
    """Seconds until one more job finishes than now (polled every 5 ms)."""
    t0 = time.monotonic()
    start = done_count(r)
    while done_count(r) == start:
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"no job finished within {timeout}s")
        time.sleep(0.005)
    return time.monotonic() - t0
