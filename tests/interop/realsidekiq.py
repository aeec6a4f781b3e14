"""Helpers for the producer/server interop tests: the real Sidekiq server as a subprocess, the
jobs it serves, the argument set every producer sends, and small Redis helpers.

``SidekiqServer`` runs Debian's ``sidekiq`` executable (or ``ruby -e`` with ``sidekiq/cli`` when
there is none) on the test Redis with ``WORKERS_RB``: ``InteropRuby`` and ``CrossJob`` record
what they got in ``t:ruby`` (args as Ruby's ``JSON.generate`` writes them) and a server
middleware records ``Sidekiq.dump_json(job)`` of every job it runs in ``t:ruby:payloads``. The
scheduled/retry poller is made to start at once and poll every 0.1-0.3 s (Sidekiq's defaults
are a 5-15 s first wait, then 5-15 s polls); everything else is stock Sidekiq 6.4.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

from harness import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))

#: What the interop daemons load: the shared test jobs plus wire_jobs.py.
WIRE_REQUIRE = ("jobs.py", os.path.join(HERE, "wire_jobs.py"))
#: The list wire_jobs.record() appends to.
SEEN = "t:wire:seen"

WORKERS_RB = r'''
require "json"
Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
Sidekiq.options[:poll_interval_average] = 0.2
module InteropQuickPoller
  def initial_wait; end
end
Sidekiq::Scheduled::Poller.prepend(InteropQuickPoller)

class InteropRecordPayload
  def call(worker, job, queue)
    Sidekiq.redis { |c| c.rpush("t:ruby:payloads", Sidekiq.dump_json(job)) }
    yield
  end
end
Sidekiq.configure_server do |config|
  config.server_middleware { |chain| chain.add InteropRecordPayload }
end

def interop_record(jid, args)
  Sidekiq.redis { |c| c.rpush("t:ruby", JSON.generate({"jid" => jid, "args" => args})) }
end

class InteropRuby
  include Sidekiq::Worker
  def perform(*args)
    interop_record(jid, args)
  end
end

# The Python CrossJob (wire_jobs.py) fails when fail_in names "python"; this one when it
# names "ruby", with the same message.
class CrossJob
  include Sidekiq::Worker
  def perform(tag, fail_in)
    interop_record(jid, [tag, fail_in])
    raise "cross failure #{tag}" if fail_in.include?("ruby")
  end
end
'''

CLI_FALLBACK = 'require "sidekiq/cli"; cli = Sidekiq::CLI.instance; cli.parse(ARGV); cli.run'


class SidekiqServer:
    """One real Sidekiq process; ``stop()`` sends TERM to its PID and waits."""

    def __init__(self, redis_url: str, tmp_path, queues=("default", "other"), concurrency=2):
        self.redis_url = redis_url
        self.dir = str(tmp_path)
        self.queues = queues
        self.concurrency = concurrency
        self.workers = os.path.join(self.dir, "workers.rb")
        with open(self.workers, "w") as f:
            f.write(WORKERS_RB)
        self.logpath = os.path.join(self.dir, f"sidekiq-{time.time_ns()}.log")
        self.proc: subprocess.Popen | None = None
        self.log = None

    def start(self, r) -> SidekiqServer:
        args = ["-r", self.workers, "-c", str(self.concurrency), "-t", "10"]
        for q in self.queues:
            args += ["-q", q]
        exe = shutil.which("sidekiq")
        cmd = [exe, *args] if exe else ["ruby", "-e", CLI_FALLBACK, "--", *args]
        # -EUTF-8: Redis replies are UTF-8 whatever the locale (CI may run with LANG unset)
        env = dict(os.environ, REDIS_URL=self.redis_url,
                   RUBYOPT=(os.environ.get("RUBYOPT", "") + " -EUTF-8").strip())
        self.log = open(self.logpath, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir,
                                     env=env, start_new_session=True)
        try:
            wait_for(lambda: self.identity(r) or self.proc.poll() is not None, 30,
                     what="Sidekiq to boot (its heartbeat in `processes`)")
        except AssertionError:
            raise AssertionError(f"Sidekiq did not boot:\n{self.output()[-3000:]}") from None
        assert self.proc.poll() is None, f"Sidekiq exited at boot:\n{self.output()[-3000:]}"
        return self

    def identity(self, r) -> str | None:
        for member in r.smembers("processes"):
            if member.decode().split(":")[-2] == str(self.proc.pid):
                return member.decode()
        return None

    def output(self) -> str:
        with open(self.logpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self, timeout: float = 30) -> int:
        """TERM by PID, wait; SIGKILL if it hangs (and fail then)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"Sidekiq ignored TERM for {timeout}s:\n{self.output()[-3000:]}")
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self.log is not None and not self.log.closed:
            self.log.close()


def servers(redis_url: str, r, tmp_path):
    """Body of a ``sidekiq`` fixture: yields ``start(**kw)`` -> a booted SidekiqServer; every
    server started is SIGKILLed by PID at teardown if a test left it running."""
    started: list[SidekiqServer] = []

    def start(**kw) -> SidekiqServer:
        server = SidekiqServer(redis_url, tmp_path, **kw)
        started.append(server)
        return server.start(r)

    yield start
    for server in started:
        server.kill()


# --- what every producer sends ----------------------------------------------------------------

#: Ruby source of the argument list (a Ruby producer's perform_async(*RUBY_ARGS)).
RUBY_ARGS = r'''
NEST = (1..50).inject("bottom") { |acc, i| i.odd? ? [acc] : {"k#{i}" => acc} }
ARGS = [2**70, -(2**65), 2**64 + 7, 1, 1.0, -0.0, 0.1, 1.0e20, 1.0e15, 2.5e-07,
        "a\u0000b", "emoji 😀 ünïcødé ☃ 日本語", "q\"uote \\ slash/ \n\t \u2028",
        NEST, {}, {"1" => 2, "" => 3}, "", [], [[]], nil, true, false]
'''


def nest() -> object:
    acc: object = "bottom"
    for i in range(1, 51):
        acc = [acc] if i % 2 else {f"k{i}": acc}
    return acc


#: The same arguments as Python values.
ARGS = [2**70, -(2**65), 2**64 + 7, 1, 1.0, -0.0, 0.1, 1.0e20, 1.0e15, 2.5e-07,
        "a\u0000b", "emoji 😀 ünïcødé ☃ 日本語", "q\"uote \\ slash/ \n\t \u2028",
        nest(), {}, {"1": 2, "": 3}, "", [], [[]], None, True, False]


def depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


def typed(value):
    """``value`` with every scalar tagged by its type and every dict as its item list, so
    ``==`` tells ``1`` from ``1.0`` and ``True``, ``-0.0`` from ``0.0``, and key orders apart."""
    if isinstance(value, dict):
        return ("dict", [(k, typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


# --- Redis helpers -----------------------------------------------------------------------------

def seen(r, key: str = SEEN) -> list[dict]:
    """What the jobs recorded (wire_jobs in queued, WORKERS_RB in Sidekiq), in run order."""
    return [json.loads(x) for x in r.lrange(key, 0, -1)]


def runs_by_jid(r, key: str = SEEN) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for rec in seen(r, key):
        out.setdefault(rec["jid"], []).append(rec)
    return out


def zentry(r, zset: str, jid: str) -> tuple[bytes, float] | None:
    """The (raw member, score) of the job ``jid`` in ``zset``, if it is there."""
    for member, score in r.zrange(zset, 0, -1, withscores=True):
        if json.loads(member).get("jid") == jid:
            return member, score
    return None


def make_due(r, zset: str, jid: str) -> bytes:
    """Rewrite the score of ``jid``'s entry to now, as an operator would (the member is left
    byte for byte as it is); returns the member."""
    member, _ = wait_for(lambda: zentry(r, zset, jid), 10, what=f"{jid} in {zset}")
    assert r.zadd(zset, {member: time.time() - 0.01}, xx=True, ch=True) == 1
    return member
