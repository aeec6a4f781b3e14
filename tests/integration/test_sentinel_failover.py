"""Redis Sentinel with real processes: a master, a replica and three redis-sentinel processes on
free ports, started here and stopped by PID. A daemon configured with the Sentinels (the
``:redis:`` form) and a producer with a ``redis+sentinel://`` URL run jobs while the replica is
promoted (SENTINEL FAILOVER); every job runs exactly once, nothing needs a restart, and
queuedctl finds the new master through the same URL.

Why exactly once holds across the failover: the test first pauses writes on the old master
(CLIENT PAUSE WRITE, as Redis's own FAILOVER command does) and waits until the replica has
every write, then asks the Sentinels to fail over. Commands sent meanwhile wait, are never
applied on the old master, and fail when the old master drops its clients on becoming a
replica; the workers treat that as a lost reply (the reservation is looked up again on the new
master), and the jobs' own records are kept outside Redis (tests/sentineljobs.py). Without the
pause, writes the old master takes between the promotion and its own demotion are lost by
Redis itself (replication is asynchronous); docs/operating.md says what that means for jobs.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter

import pytest
import redis
import yaml

import queued
from ctlrun import ctl_json
from conftest import IN_CI, RedisServer, find_redis_server, free_port
from harness import Daemon, wait_for

SENTINEL_BINARY = "/usr/bin/redis-sentinel"
SERVICE = "mymaster"


class Sentinels:
    """Three redis-sentinel processes watching ``SERVICE``."""

    def __init__(self, tmp_path, master_port: int):
        self.ports = [free_port() for _ in range(3)]
        self.procs: list[subprocess.Popen] = []
        for port in self.ports:
            conf = tmp_path / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 2000\n"
                f"sentinel failover-timeout {SERVICE} 10000\n")
            self.procs.append(subprocess.Popen([SENTINEL_BINARY, str(conf)],
                                               stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
        self.clients = [redis.Redis(port=p, socket_timeout=2, decode_responses=True)
                        for p in self.ports]

    def ready(self) -> bool:
        """Each knows the replica and the two other Sentinels."""
        try:
            return all(len(c.sentinel_slaves(SERVICE)) == 1
                       and len(c.sentinel_sentinels(SERVICE)) == 2 for c in self.clients)
        except redis.ConnectionError:
            return False

    def master_port(self) -> set[int]:
        return {int(c.sentinel_get_master_addr_by_name(SERVICE)[1]) for c in self.clients}

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def cluster(tmp_path):
    binary = find_redis_server()
    missing = [what for what, path in (("redis-server", binary),
                                       ("redis-sentinel", SENTINEL_BINARY))
               if not path or not os.access(path, os.X_OK)]
    if missing:
        if IN_CI:
            pytest.fail(f"{', '.join(missing)} not installed; CI must install it (scripts/test)")
        pytest.skip(f"{', '.join(missing)} not installed")
    master = RedisServer(binary)
    replica = RedisServer(binary)
    master.start()
    replica.extra = ("--replicaof", "127.0.0.1", str(master.port))
    replica.start()
    sentinels = None
    try:
        sentinels = Sentinels(tmp_path, master.port)
        wait_for(sentinels.ready, 30, interval=0.2, what="the Sentinels to find each other")
        yield master, replica, sentinels
    finally:
        if sentinels is not None:
            sentinels.stop()
        replica.stop()
        master.stop()


def runs(path) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.split()[0] for line in f.read().splitlines()]


def test_a_failover_mid_run_loses_no_job_and_runs_none_twice(cluster, tmp_path):
    master, replica, sentinels = cluster
    hosts = [f"127.0.0.1:{p}" for p in sentinels.ports]
    # (the producer's and queuedctl's URL names a Sentinel that is down first: it is skipped)
    url = f"redis+sentinel://127.0.0.1:{free_port()},{','.join(hosts)}/{SERVICE}/0"
    # Given a daemon that finds its Redis through the Sentinels (the config file's form)
    config = tmp_path / "sidekiq.yml"
    config.write_text(yaml.safe_dump({
        "concurrency": 4, "heartbeat_interval": 0.5,
        "require": [os.path.join(os.path.dirname(os.path.dirname(__file__)),
                                 "sentineljobs.py")],
        "redis": {"sentinels": hosts, "master_name": SERVICE}}))
    d = Daemon(master.url, tmp_path, args=("-C", str(config))).start()
    try:
        # And a producer with the redis+sentinel:// URL, and 3,000 jobs of 2-10 ms
        producer = queued.Client(url=url)
        ran_path = str(tmp_path / "ran.txt")
        jids = producer.push_bulk({"class": "Note", "args": [
            [ran_path, 2 + i % 9] for i in range(3000)]})
        old = redis.Redis(port=master.port)
        new = redis.Redis(port=replica.port)
        wait_for(lambda: len(runs(ran_path)) >= 500, 60, what="500 jobs done")
        # When the replica is promoted mid-run: writes paused on the old master until the
        # replica has them all, then SENTINEL FAILOVER
        old.execute_command("CLIENT", "PAUSE", "60000", "WRITE")
        offset = old.info("replication")["master_repl_offset"]
        wait_for(lambda: new.info("replication")["slave_repl_offset"] >= offset, 10,
                 what="the replica to catch up")
        at_failover = len(runs(ran_path))
        sentinels.clients[0].execute_command("SENTINEL", "FAILOVER", SERVICE)
        wait_for(lambda: sentinels.master_port() == {replica.port}, 30, interval=0.1,
                 what="every Sentinel to name the new master")
        wait_for(lambda: new.info("replication")["role"] == "master", 10, what="promotion")
        # And the old master made a replica of the new one before its writes resume (the
        # Sentinels would do it too, seconds later, and the writes let through meanwhile
        # would be lost): the commands that waited are refused there (READONLY), never applied
        old.execute_command("REPLICAOF", "127.0.0.1", str(replica.port))
        old.execute_command("CLIENT", "UNPAUSE")
        # Then every job runs, on the new master, exactly once; nothing was restarted
        wait_for(lambda: len(runs(ran_path)) >= 3000, 120, what="every job")
        wait_for(lambda: new.llen("queue:default") == 0 and not any(
            new.zcard(k) for k in new.keys("queued:reserved:*")), 20,
            what="no job left reserved")
        # And queuedctl finds the new master through the same URL (its stats: every job)
        wait_for(lambda: ctl_json("stats", url=url)["processed"] == 3000, 20,
                 what="queuedctl stats to count every job")
        master_pid, workers = d.pid, sorted(d.worker_pids())
        assert d.stop() == 0
        counted = Counter(runs(ran_path))
        assert counted == Counter(jids), (
            f"{len(set(jids) - set(counted))} never ran, "
            f"{sum(1 for n in counted.values() if n > 1)} ran twice; the daemon said:\n"
            + "\n".join(x for x in d.output().splitlines() if "WARNING" in x or "ERROR" in x))
        assert new.zcard("retry") == 0 and new.zcard("dead") == 0, [
            (j["error_class"], j["error_message"]) for j in map(json.loads, new.zrange(
                "retry", 0, -1) + new.zrange("dead", 0, -1))]
        # And the jobs' own writes (get_redis()) reached the new master, each once
        assert {k.decode(): int(v) for k, v in new.hgetall("t:sentinel:runs").items()} == {
            jid: 1 for jid in jids}
        assert at_failover < 3000  # (it happened mid-run)
        out = d.output()
        assert "Traceback" not in out
        print(f"\nfailover after {at_failover} of 3000 jobs; the daemon's lines about it:\n"
              + "\n".join(x for x in out.splitlines() if "Redis" in x)[:2000])
        assert master_pid == d.pid and len(workers) == 4
    finally:
        d.cleanup()
