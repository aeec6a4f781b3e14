"""What scripts/bench (queued alone) and scripts/bench_peers.py (queued beside its peers) share:
a throwaway redis-server, percentiles, waiting for a job's stamp, and process trees that are
measured (PSS) and stopped by PID."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import psutil
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


class RedisServer:
    """A redis-server of our own on a free loopback port, no persistence."""

    def __init__(self, binary):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="queued-bench-")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir], stdout=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        r = redis.Redis.from_url(self.url)
        for _ in range(200):
            try:
                r.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.02)
        raise SystemExit("redis-server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_key(r, key, timeout=300):
    """The float a job stored in ``key``, once it is there."""
    deadline = time.time() + timeout
    while r.get(key) is None:
        if time.time() > deadline:
            raise TimeoutError(f"timed out waiting for {key}")
        time.sleep(0.005)
    return float(r.get(key))


def rates(r, n) -> tuple[float, float]:
    """Jobs/s of a throughput run from the stamps its jobs left (bench_jobs.BenchJob,
    peers/common.py, peers/sidekiq_jobs.rb): after the warm-up (the jobs after the first tenth,
    from the finish of the one that ends it to the finish of the last) and from the first job
    (SIDEKIQ_FORMAT.md section 9: n / (last - first))."""
    warm = r.get("bench:warm")
    return _rates(n, float(r.get("bench:first")), float(warm) if warm else None,
                  float(r.get("bench:last")))


def _rates(n, first, warm, last) -> tuple[float, float]:
    """(after the warm-up: from the finish of the job that ends it, or without one from the
    first, to the last; from the first) for ``n`` jobs finished at those times."""
    after = (n - n // 10) / (last - warm) if warm is not None else (n - 1) / (last - first)
    return after, n / (last - first)


class LogSink:
    """Where a daemon's stderr goes when its log is measured: one end of an AF_UNIX stream
    socket, as systemd's StandardError=journal gives a service (systemd/queued.service), the
    other end drained by a thread here as journald would, counting lines."""

    def __init__(self):
        self.child, self._ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lines = 0
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self):
        while data := self._ours.recv(1 << 16):
            self.lines += data.count(b"\n")

    def close(self) -> int:
        """After the daemon exited: the lines it wrote."""
        self.child.close()
        self._thread.join(10)
        self._ours.close()
        return self.lines


class CatSink:
    """Where a daemon's stderr goes when queued's own cost of a log line is measured: a pipe
    read by ``cat`` into a file counted once the daemon exited, so that no reader of ours in
    Python competes for the cores (issue 18: LogSink's reader thread was most of the "31 %"
    the per-job line once seemed to cost). Used as LogSink is: ``child``, then ``close()``."""

    def __init__(self):
        self._out = tempfile.TemporaryFile()
        self._cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=self._out)
        self.child = self._cat.stdin

    def close(self) -> int:
        """After the daemon exited: the lines it wrote."""
        self.child.close()
        self._cat.wait(30)
        self._out.seek(0)
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: self._out.read(1 << 16), b""))
        self._out.close()
        return lines


class FileSink:
    """A daemon's stderr to a file (logfile-like: no reader process), its lines counted once
    the daemon exited. Used as LogSink is: ``child``, then ``close()``."""

    def __init__(self):
        self.child = tempfile.TemporaryFile()

    def close(self) -> int:
        self.child.seek(0)
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: self.child.read(1 << 16), b""))
        self.child.close()
        return lines


def redis_cpu(r) -> float:
    """Seconds of CPU the Redis server has used (INFO cpu: used_cpu_sys + used_cpu_user)."""
    info = r.info("cpu")
    return info["used_cpu_sys"] + info["used_cpu_user"]


def collect(r, n, timeout=10, key="bench:lat"):
    """The values jobs pushed to ``key`` once there are ``n`` (or at the timeout); clears it."""
    deadline = time.time() + timeout
    while r.llen(key) < n and time.time() < deadline:
        time.sleep(0.01)
    values = [float(v) for v in r.lrange(key, 0, -1)]
    r.delete(key)
    return values


def write_queued_config(url, concurrency, extra) -> str:
    """A config file for ``python -m queued -C`` that runs scripts/bench_jobs.py."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        json.dump({"redis_url": url, "concurrency": concurrency,
                   "require": [os.path.join(HERE, "bench_jobs.py")], **extra}, f)  # JSON is YAML
    return f.name


class ProcessTree:
    """The processes of one system under test: the roots we started and all their
    descendants. Measured by PSS and stopped by PID (TERM to the roots, then KILL to whatever
    of the tree is left after ``timeout``)."""

    def __init__(self, commands, env=None, cwd=None):
        self.roots = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       stdin=subprocess.DEVNULL, env=env, cwd=cwd)
                      for cmd in commands]
        self.killed = 0  # processes that needed SIGKILL

    def processes(self) -> list[psutil.Process]:
        procs = []
        for root in self.roots:
            try:
                p = psutil.Process(root.pid)
                procs += [p] + p.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        return procs

    def alive(self) -> bool:
        return all(root.poll() is None for root in self.roots)

    def pss_mib(self) -> float:
        total = 0
        for p in self.processes():
            try:
                total += p.memory_full_info().pss
            except psutil.NoSuchProcess:
                pass
        return total / 2**20

    def stop(self, timeout=20.0):
        tree = self.processes()  # remembered now: children may be reparented once roots exit
        for root in self.roots:
            if root.poll() is None:
                root.send_signal(signal.SIGTERM)
        _, left = psutil.wait_procs(tree, timeout=timeout)
        for p in left:
            try:
                p.kill()  # psutil checks the PID still names the same process
                self.killed += 1
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(left, timeout=5)
        for root in self.roots:
            root.wait(5)


def push_bulk(n, job=None, more=()):
    """n jobs of ``job`` (default the no-op bench_jobs.BenchJob; each given ``n``, the total,
    then the arguments ``more``) for queued through the default client."""
    import bench_jobs
    job = job or bench_jobs.BenchJob
    for start in range(0, n, 1000):
        job.perform_bulk([[n, *more]] * min(1000, n - start))


class Stamps:
    """Where jobs record their finish without a Redis command (bench_jobs.CpuJob's
    ``stamps``): a directory of one file per process, each line a time as ``%.6f`` (18 bytes
    until 2286). ``count`` reads only the files' sizes."""

    LINE = 18

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="queued-stamps-")

    def count(self) -> int:
        return sum(e.stat().st_size for e in os.scandir(self.dir)) // self.LINE

    def wait(self, n: int, timeout: float = 300) -> None:
        """Until ``n`` jobs have recorded their finish."""
        deadline = time.time() + timeout
        while self.count() < n:
            if time.time() > deadline:
                raise TimeoutError(f"timed out waiting for {n} stamps ({self.count()} there)")
            time.sleep(0.005)

    def times(self) -> list[float]:
        out = []
        for e in os.scandir(self.dir):
            with open(e.path, "rb") as f:
                out += [float(x) for x in f.read().split()]
        return sorted(out)

    def rates(self, n: int) -> tuple[float, float]:
        """As ``rates``, from the stamps: after the warm-up, and from the first job."""
        times = self.times()
        if len(times) != n:
            raise RuntimeError(f"{len(times)} stamps for {n} jobs")
        return _rates(n, times[0], times[n // 10 - 1], times[-1])

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def _brpop_loop(url, total):
    from queued.keys import Keys  # (benchlib's importers put the repository on sys.path)
    r = redis.Redis.from_url(url)
    queue = Keys().queue("default")
    while True:
        item = r.brpop(queue, 1)
        if item is None:
            return
        json.loads(item[1])
        n = r.incr("bench:done")
        if n == 1 or n == total or n == total // 10:
            r.set("bench:first" if n == 1 else "bench:last" if n == total else "bench:warm",
                  repr(time.time()))


def bare_round_trips(url, n=5000) -> float:
    """The one-by-one ceiling: ``n`` PINGs, one at a time, on a held socket with no client
    library; round trips/s from the end of the first to the end of the last (timed as the
    enqueue rates are). No producer pushing one job per round trip can beat it right now."""
    where = redis.connection.parse_url(url)
    with socket.create_connection((where["host"], where["port"])) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(n):
            if i == 1:
                t0 = time.perf_counter()
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            if sock.recv(64) != b"+PONG\r\n":
                raise RuntimeError("unexpected reply to PING")
        return (n - 1) / (time.perf_counter() - t0)


def baseline(url, n, concurrency):
    """The bare at-most-once loop: ``concurrency`` processes that BRPOP a job, parse it and
    INCR; jobs/s after the warm-up, like the systems under test (``rates``)."""
    r = redis.Redis.from_url(url)
    r.flushall()
    push_bulk(n)
    procs = [multiprocessing.Process(target=_brpop_loop, args=(url, n)) for _ in range(concurrency)]
    for p in procs:
        p.start()
    wait_key(r, "bench:last")
    for p in procs:
        p.join()
    return rates(r, n)[0]
