"""A HUP whose new job code takes 8 s to import (a big application's) keeps the master's loop
running (issue 16.2): the import runs in a helper thread (queued/server/loader.py). Before, it
ran in the loop: the heartbeat went stale, a job due in 2 s ran 6 s late, and systemd's
watchdog saw no ping for the whole import (``WatchdogSec=10`` killed the master mid-reload).

Everything here is measured against events the job code writes into Redis as its import
begins and ends, never against a wall-clock bound."""
import signal
import time

import pytest

from harness import wait_for
from integration.test_systemd_notify import Systemd

#: WatchdogSec=2: a ping due every second.
WATCHDOG_USEC = 2_000_000

CODE = '''
import time

import queued

SLOW = {slow!r}
VERSION = {version!r}
if SLOW:
    _r = queued.get_redis()
    _r.set("t:import:began", repr(time.time()))
    time.sleep(SLOW)
    _r.set("t:import:ended", repr(time.time()))


class Stamp(queued.Job):
    def perform(self, name):
        # (its version first: the test waits for the stamp, then reads the version)
        queued.get_redis().hset("t:versions", name, VERSION)
        queued.get_redis().hset("t:stamps", name, repr(time.time()))
'''


@pytest.fixture
def systemd(tmp_path):
    s = Systemd(str(tmp_path / "notify.sock"))
    yield s
    s.close()


def test_an_8s_import_under_hup_keeps_the_heartbeat_the_scheduler_and_the_watchdog_going(
        daemon, producer, r, systemd, tmp_path):
    # Given a daemon under systemd (a watchdog ping due every second) whose job code loads
    # at once
    code = tmp_path / "slowjobs.py"
    code.write_text(CODE.format(slow=0, version=1))
    d = daemon(require=(str(code),), concurrency=2, env={
        "NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": str(WATCHDOG_USEC)})
    wait_for(lambda: any(m.startswith("READY=1") for m in systemd.texts()), 10, what="READY")
    identity = d.identity()
    old_workers = set(d.worker_pids())
    # When a deploy brings code that takes 8 s to import, and the master gets HUP
    code.write_text(CODE.format(slow=8.0, version=2))
    d.signal(signal.SIGHUP)
    began = float(wait_for(lambda: r.get("t:import:began"), 10, what="the import to begin"))
    began_mono = time.monotonic()
    # and a job is due 2 s later
    producer.push({"class": "Stamp", "args": ["due"], "at": time.time() + 2})
    beats = set()

    def ended():
        beats.add(float(r.hget(identity, "beat") or 0))
        return r.get("t:import:ended")
    ended_at = float(wait_for(ended, 30, interval=0.05, what="the import to end"))
    ended_mono = time.monotonic()
    # Then the due job ran while the import still went on (the scheduler and the old workers
    # kept going)
    ran = float(wait_for(lambda: r.hget("t:stamps", "due"), 10, what="the due job"))
    assert began < ran < ended_at and r.hget("t:versions", "due") == b"1"
    # And the heartbeat kept being written during the import (every 0.5 s here: a few at the
    # very least), and systemd kept getting its pings
    assert len([b for b in beats if began < b < ended_at]) >= 3, sorted(beats)
    assert len(systemd.pings(began_mono, ended_mono)) >= 3
    # And the reload then went through: the workers replaced, the new code runs
    wait_for(lambda: len(d.worker_pids()) == 2 and not old_workers & set(d.worker_pids()), 30,
             what="the workers replaced")
    producer.push({"class": "Stamp", "args": ["after"]})
    wait_for(lambda: r.hget("t:stamps", "after"), 10, what="a job on the new code")
    assert r.hget("t:versions", "after") == b"2"
    assert d.stop() == 0
