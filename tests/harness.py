"""Run a real ``queued`` daemon in a subprocess, as an operator would, and watch it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import redis
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def wait_for(predicate, timeout=10.0, interval=0.02, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Daemon:
    def __init__(self, redis_url: str, tmp_path, require=("jobs.py",), **settings):
        self.redis_url = redis_url
        self.dir = str(tmp_path)
        data = {"redis_url": redis_url, "concurrency": 2, "heartbeat_interval": 0.5,
                "require": [os.path.join(HERE, r) for r in require], **settings}
        self.config = os.path.join(self.dir, f"queued-{time.time_ns()}.yml")
        with open(self.config, "w") as f:
            yaml.safe_dump(data, f)
        self.logpath = self.config + ".log"
        self.proc: subprocess.Popen | None = None
        self.r = redis.Redis.from_url(redis_url)

    def start(self, *extra: str, wait=True) -> "Daemon":
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.log = open(self.logpath, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "queued", "-C", self.config, *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        if wait:
            wait_for(lambda: len(self.worker_pids()) >= 1 and self.identity(), 15,
                     what="daemon boot")
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def identity(self) -> str | None:
        for member in self.r.smembers("processes"):
            if member.decode().split(":")[-2] == str(self.pid):
                return member.decode()
        return None

    def worker_pids(self) -> list[int]:
        try:
            return [c.pid for c in psutil.Process(self.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def signal(self, sig) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout=30.0) -> int:
        return self.proc.wait(timeout)

    def stop(self, timeout=40.0) -> int:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill_all(self) -> None:
        """SIGKILL the master and its workers at once (a host dying)."""
        pids = [self.pid] + self.worker_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)

    def output(self) -> str:
        with open(self.logpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def cleanup(self) -> None:
        if self.proc and self.proc.poll() is None:
            for pid in [self.pid] + self.worker_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(10)
        self.log.close()
