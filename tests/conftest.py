"""Shared fixtures: a real redis-server on a free loopback port, started once per session.

Locally a missing redis-server skips the tests that need it; under CI (``CI`` set) it is an
error, because a skipped test proves nothing.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import redis as redis_lib

#: queued.testing's fixtures (queued_fake, queued_inline), as an application turns them on.
pytest_plugins = ["queued.testing.pytest_plugin"]

IN_CI = bool(os.environ.get("CI"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_redis_server() -> str | None:
    for cand in (os.environ.get("QUEUED_TEST_REDIS_SERVER"), "/usr/bin/redis-server",
                 shutil.which("redis-server")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


class RedisServer:
    """One redis-server process this test session owns (stopped by PID at the end)."""

    def __init__(self, binary: str, extra: tuple[str, ...] = ()):
        self.binary = binary
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="queued-test-redis-")
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--loglevel", "warning", *self.extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis_lib.Redis(port=self.port, socket_timeout=1)
        deadline = time.time() + 10
        while True:
            try:
                client.ping()
                return
            except redis_lib.ConnectionError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} did not start")
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server():
    binary = find_redis_server()
    if binary is None:
        if IN_CI:
            pytest.fail("redis-server is not installed; CI must install it (scripts/test does)")
        pytest.skip("redis-server not installed (CI installs it and runs these tests)")
    server = RedisServer(binary)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server):
    client = redis_lib.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def r(redis_url):
    """A raw client (bytes in, bytes out) on a freshly flushed Redis."""
    client = redis_lib.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def daemon(redis_url, tmp_path, r):
    """``daemon(**settings)`` starts a real queued master; all are killed at teardown."""
    from harness import Daemon
    started = []

    def start(*extra, wait=True, **settings):
        d = Daemon(redis_url, tmp_path, **settings)
        started.append(d)
        return d.start(*extra, wait=wait)

    yield start
    for d in started:
        d.cleanup()
    if started:
        # and Redis has dropped their blocked fetches (it notices a closed socket on its next
        # turn; until then a push could still be handed to one of them)
        from harness import wait_for
        def blocked_workers():
            try:
                clients = r.client_list()
            except redis_lib.RedisError:  # (a test that stopped this Redis: nothing to wait for)
                return []
            return [c for c in clients
                    if c["name"].startswith("queued-worker-") and "b" in c["flags"]]
        wait_for(lambda: not blocked_workers(), 10,
                 what="Redis to drop the killed workers' blocked fetches")


@pytest.fixture
def default_client(redis_url, monkeypatch):
    """queued's default client (what producers and job code use) on the test Redis; the
    previous default comes back afterwards."""
    import queued.client as client_mod
    monkeypatch.setattr(client_mod, "_default", None)
    client = client_mod.configure(url=redis_url)
    yield client
    client.redis.close()


@pytest.fixture
def producer(default_client):
    return default_client


#: The worker identity the in-process Fetcher tests use (tests/test_fetch.py, test_recovery.py).
FETCH_IDENTITY = "host:1:abc"


def job(i, queue="default") -> bytes:
    """A compact job payload numbered ``i`` (its jid is ``i`` in hex), as a producer writes it."""
    return json.dumps({"class": "X", "args": [i], "jid": f"{i:024x}", "queue": queue},
                      separators=(",", ":")).encode()


@pytest.fixture
def make_fetcher(redis_url):
    """``make_fetcher(**options)``: a worker's Fetcher on the test Redis, closed at teardown."""
    from queued.server.fetch import Fetcher
    from queued.keys import Keys
    made = []

    def make(queues=("default",), weighted=None, strict=True, block=0.2, dead_timeout=15552000,
             dead_max=10000, slot=0, identity=FETCH_IDENTITY, register=True):
        if register:  # as its master did before forking it (reserve.lua checks)
            client = redis_lib.Redis.from_url(redis_url)
            client.hsetnx(Keys().masters, identity,
                          json.dumps({"slots": slot + 1, "queues": list(queues)}))
            client.close()
        f = Fetcher(redis_url, Keys(), identity, slot, list(queues),
                    list(weighted if weighted is not None else queues), strict, block,
                    dead_timeout, dead_max)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()
        f.redis.close()


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server of the session's own (tests/pgserver.py). Locally a machine without
    Debian's postgresql skips the tests that need it; under CI that is an error."""
    from pgserver import PostgresServer, find_bin_dir
    bin_dir = find_bin_dir()
    if bin_dir is None:
        if IN_CI:
            pytest.fail("PostgreSQL is not installed; CI must install it (scripts/test does)")
        pytest.skip("PostgreSQL not installed (apt-get install postgresql; CI runs these tests)")
    server = PostgresServer(bin_dir, free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def django_site(postgres_server, redis_server):
    """The test Django project (tests/djangosite.py), set up in this process once."""
    from djangosite import DjangoSite
    site = DjangoSite(postgres_server, redis_server.url)
    site.setup()
    return site


@pytest.fixture
def django_db(django_site):
    """The project's tables, empty before and after the test."""
    django_site.clean()
    yield django_site
    django_site.clean()


@pytest.fixture
def after_commit():
    """Pushes in this process wait for commits (queued.django), for this test."""
    from queued.django import commit
    commit.install()
    yield
    commit.uninstall()
