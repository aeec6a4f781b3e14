"""A PostgreSQL server of the test session's own (Debian's ``postgresql`` package), as
conftest.py starts Redis: a fresh cluster in a temporary folder, on a free loopback port,
stopped by its PID at the end. PostgreSQL refuses to run as root, so as root the cluster and
the server belong to the ``postgres`` user the package creates (subprocess's ``user=``: no
wrapper process between us and the server, whose PID we hold).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

#: The session's server runs with this many connections at most (tests/test_django_boot.py
#: fills them up to see the daemon's warning).
MAX_CONNECTIONS = 60
SUPERUSER = "queued"


def find_bin_dir() -> str | None:
    """The newest /usr/lib/postgresql/<version>/bin with initdb and postgres."""
    found = []
    for initdb in glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        folder = os.path.dirname(initdb)
        version = folder.split("/")[-2]
        if os.access(os.path.join(folder, "postgres"), os.X_OK) and version.isdigit():
            found.append((int(version), folder))
    return max(found)[1] if found else None


class PostgresServer:
    def __init__(self, bin_dir: str, port: int):
        self.bin_dir = bin_dir
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="queued-test-pg-")
        self.data = os.path.join(self.dir, "data")
        self.proc: subprocess.Popen | None = None
        self.owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        if self.owner is not None:
            os.chown(self.dir, self.owner.pw_uid, self.owner.pw_gid)

    def _run_as(self) -> dict:
        if self.owner is None:
            return {}
        return {"user": self.owner.pw_uid, "group": self.owner.pw_gid, "extra_groups": []}

    def start(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
        subprocess.run([os.path.join(self.bin_dir, "initdb"), "-D", self.data, "-U", SUPERUSER,
                        "-A", "trust", "-E", "UTF8", "--no-sync"], cwd=self.dir, env=env,
                       check=True, capture_output=True, **self._run_as())
        self.log = open(os.path.join(self.dir, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(self.bin_dir, "postgres"), "-D", self.data, "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", f"max_connections={MAX_CONNECTIONS}"],
            cwd=self.dir, env=env, stdout=self.log, stderr=subprocess.STDOUT, **self._run_as())
        import psycopg
        deadline = time.time() + 30
        while True:
            try:
                psycopg.connect(self.dsn("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"postgres on port {self.port} did not start: "
                                       f"{self.output()[-2000:]}")
                time.sleep(0.05)

    def dsn(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname}"

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> None:
        import psycopg
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')

    def output(self) -> str:
        try:
            with open(os.path.join(self.dir, "server.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: clients are cut off
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None) is not None:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
