"""Every signal the master handles, sent while the job code is still loading (a slow import, as
a big application's): the process is neither killed (HUP, USR1, USR2's default action) nor
suspended (TSTP, TTIN's), and the signal is acted on once the master's loop runs (issue
16.1.10; only TERM was kept before)."""
import json
import os
import signal

import jobs
import psutil
import pytest
import yaml

from harness import wait_for

SLOW = ("jobmods/slow_import.py", "jobs.py")


def booting(daemon, r, **settings):
    """A daemon in the middle of importing its job code (the master's handlers not yet in),
    which goes on importing until ``loaded(d, r)``."""
    d = daemon(require=SLOW, wait=False, **settings)
    wait_for(lambda: r.get("t:importing"), 10, what="the import to begin")
    return d


def loaded(d, r) -> None:
    """Let the import end, after the test's signal: it came while the import ran (the master
    is not registered yet)."""
    assert d.identity() is None
    r.set("t:import_gate", 1)


def running(d) -> bool:
    """Alive and not stopped by a TSTP/TTIN's default action."""
    try:
        return psutil.Process(d.pid).status() not in (psutil.STATUS_STOPPED,
                                                      psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def up(d, r) -> None:
    """The loop runs: the master is registered in Redis."""
    wait_for(lambda: d.proc.poll() is None and d.identity(), 15, what="the master's loop")


@pytest.mark.parametrize("sig", [signal.SIGTSTP, signal.SIGUSR1])
def test_quiet_during_boot_leaves_a_quiet_master_not_a_suspended_one(daemon, r, sig):
    d = booting(daemon, r)
    d.signal(sig)
    loaded(d, r)
    assert running(d)
    up(d, r)
    # Then it is quiet once up: it forks no worker, says so, and stops cleanly on TERM
    d.wait_log(f"{sig.name}: quiet", 10)
    assert running(d) and d.worker_pids() == []
    wait_for(lambda: r.hget(d.identity(), "quiet") == b"true", 10, what="quiet in Redis")
    d.signal(signal.SIGTERM)
    assert d.wait(15) == 0


def test_ttin_during_boot_dumps_once_up_and_does_not_suspend(daemon, r):
    d = booting(daemon, r)
    d.signal(signal.SIGTTIN)
    loaded(d, r)
    assert running(d)
    up(d, r)
    d.wait_log("TTIN master pid=", 10)
    wait_for(lambda: len(d.worker_pids()) == 2, 10, what="the workers")
    assert running(d)
    assert d.stop() == 0


def test_hup_during_boot_reloads_once_up_instead_of_killing(daemon, r):
    # Given a daemon tagged "before", still importing its job code
    d = booting(daemon, r, tag="before")
    # When its config file then says "after", and a HUP comes during the import
    with open(d.config) as f:
        settings = yaml.safe_load(f)
    with open(d.config, "w") as f:
        yaml.safe_dump({**settings, "tag": "after"}, f)
    d.signal(signal.SIGHUP)
    loaded(d, r)
    # Then once up it is not killed: it read the file again and runs by it, the new tag in its
    # process record and its title, its two workers up (forked once the new code loaded)
    up(d, r)
    wait_for(lambda: json.loads(r.hget(d.identity(), "info"))["tag"] == "after", 15,
             what="the new tag in the process record")
    wait_for(lambda: len(d.worker_pids()) == 2, 10, what="the workers")
    assert running(d)
    # (the master sets its title on its loop's next turn: it may not have come yet)
    title = wait_for(lambda: " after " in d.title() and d.title(), 10, what="the new title")
    assert "before" not in title
    assert d.stop() == 0


def test_usr2_during_boot_reopens_the_log_once_up(daemon, r, tmp_path, producer):
    # Given a daemon logging to a file, still importing its job code, whose file logrotate
    # then moves away
    logfile = tmp_path / "queued.log"
    d = booting(daemon, r, logfile=str(logfile))
    wait_for(logfile.exists, 10, what="the log file")
    rotated = tmp_path / "queued.log.1"
    os.rename(logfile, rotated)
    # When a USR2 comes during the import
    d.signal(signal.SIGUSR2)
    loaded(d, r)
    # Then once up the master and its workers write to a new file of that name, and the moved
    # one gets nothing more
    up(d, r)
    wait_for(lambda: logfile.exists() and "USR2: log file reopened" in logfile.read_text(), 10,
             what="the reopen in a new log file")
    moved = rotated.read_text()
    jid = jobs.Record.perform_async("after-usr2")
    wait_for(lambda: jid in logfile.read_text(), 10, what="a worker's line in the new file")
    assert running(d)
    assert d.stop() == 0
    assert rotated.read_text() == moved and "bye" in logfile.read_text()


def test_int_during_boot_stops_cleanly_once_up(daemon, r):
    d = booting(daemon, r)
    d.signal(signal.SIGINT)
    loaded(d, r)
    # (a KeyboardInterrupt inside the import was a traceback and status 1)
    assert d.wait(15) == 0
    out = d.output()
    assert "INT: shutting down" in out and "Traceback" not in out
    assert r.smembers("processes") == set()
