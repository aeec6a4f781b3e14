"""Booting the daemon inside the test Django project (tests/djangoproj): autodiscovery that
stops on a broken jobs module, settings.QUEUED as the one source of the config, ``-r`` naming
the project's folder, ``python manage.py queued``, the max_connections warning, and the
project's own TestCase tests under Django's test runner."""
import os
import re
import subprocess
import sys

import psycopg
import pytest

from djangosite import PROJECT
from harness import ROOT, Daemon, wait_for

MANAGE = os.path.join(PROJECT, "manage.py")


def one_daemon(request, *args, **kwargs) -> Daemon:
    d = Daemon(*args, **kwargs)
    request.addfinalizer(d.cleanup)
    return d


def test_a_broken_jobs_module_of_an_app_stops_the_boot_with_its_traceback(daemon, django_db):
    # Given an installed app whose jobs module imports a library the machine lacks
    d = daemon(require=(), cwd=PROJECT, env=django_db.env("djsite.settings_broken"),
               wait=False)
    # Then the daemon stops, exit 4 (as for any job code), with the traceback down to the
    # app's own line, and the one-line reason last
    assert d.wait(30) == 4
    out = d.output()
    assert "Traceback (most recent call last)" in out
    assert re.search(r'brokenapp/helpers\.py", line 4', out)
    assert out.strip().splitlines()[-1] == (
        "queued: cannot load job code 'brokenapp.jobs': ModuleNotFoundError: No module named "
        f"'no_such_library_for_queued_tests' ({PROJECT}/brokenapp/helpers.py:4)")


def test_settings_queued_is_the_config_and_a_config_file_besides_it_is_refused(
        daemon, django_db, r, tmp_path):
    # Given settings.QUEUED (one process, the django_only queue, a tag) and no -C
    d = daemon(args=(), require=(), cwd=PROJECT, env=django_db.env("djsite.settings_queued"))
    assert f"config: settings.QUEUED of djsite.settings_queued (no environment section); " \
           f"Redis {django_db.redis_url} from redis_url in settings.QUEUED of " \
           f"djsite.settings_queued" in d.output()
    assert len(d.worker_pids()) == 1 and "from-settings" in d.title()
    # Then its queue is served
    r.lpush("queue:django_only", '{"class":"Backend","args":[],"jid":"' + "d" * 24 + '"}')
    wait_for(lambda: r.llen("t:dj:backends") == 1, 10, what="the job")
    assert d.stop() == 0
    # And a -C file as well is refused, naming both
    both = daemon("-C", os.path.join(str(tmp_path), "other.yml"), args=(), require=(),
                  cwd=PROJECT, env=django_db.env("djsite.settings_queued"), wait=False)
    assert both.wait(30) == 2
    assert both.output().strip() == (
        f"queued: settings.QUEUED of djsite.settings_queued and {tmp_path}/other.yml (-C) "
        "both hold queued's settings: keep one (queued reads one source, never a mix of two)")


def test_dash_r_naming_the_projects_folder_sets_django_up(daemon, django_db, r):
    # Given no DJANGO_SETTINGS_MODULE and no project on the path: -r names the folder
    env = {k: v for k, v in django_db.env().items()
           if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    d = daemon("-r", PROJECT, require=(), env=env, concurrency=1)
    # Then the settings come from its manage.py and its apps' jobs are found
    assert "jobs: Backend, Remember, SeeOrder, SlowQuery, Touch" in d.output()
    r.lpush("queue:default", '{"class":"Backend","args":[],"jid":"' + "e" * 24 + '"}')
    wait_for(lambda: r.llen("t:dj:backends") == 1, 10, what="the job")
    assert d.stop() == 0


def test_manage_py_queued_runs_the_daemon_with_queueds_own_flags(request, django_db, r,
                                                                 redis_url, tmp_path):
    # Given `python manage.py queued --settings djsite.settings -c 1 -q only_here -v`
    d = one_daemon(request, redis_url, tmp_path, env=django_db.env(), cwd=PROJECT,
                   args=("--settings", "djsite.settings", "-c", "1", "-q", "only_here", "-v",
                         "--redis-url", redis_url))
    d.program = [sys.executable, MANAGE, "queued"]
    d.start()
    # Then queued took -c, -q and -v as its own (Django's -v would be verbosity)
    assert len(d.worker_pids()) == 1 and "queues=only_here" in d.output()
    assert "DEBUG" in d.output()
    r.lpush("queue:only_here", '{"class":"Backend","args":[],"jid":"' + "f" * 24 + '"}')
    wait_for(lambda: r.llen("t:dj:backends") == 1, 10, what="the job")
    assert d.stop() == 0
    # And `manage.py help queued` shows queued's flags
    shown = subprocess.run([sys.executable, MANAGE, "help", "queued"], env={
        **os.environ, **django_db.env()}, cwd=PROJECT, capture_output=True, text=True,
        timeout=60)
    assert shown.returncode == 0 and "-c N, --concurrency N" in shown.stdout


def test_a_database_that_cannot_serve_every_worker_is_warned_about(daemon, django_db, tmp_path):
    from pgserver import MAX_CONNECTIONS
    settings = {"concurrency": 2}
    # Given a server with room for every worker: no warning
    d = daemon(require=(), cwd=PROJECT, env=django_db.env(), **settings)
    assert "max_connections" not in d.output()
    assert d.stop() == 0
    # When other clients hold all but one of its connections
    held = [psycopg.connect(django_db.postgres.dsn("postgres"))
            for _ in range(MAX_CONNECTIONS - 3 - 1)]
    try:
        d = daemon(require=(), cwd=PROJECT, env=django_db.env(), **settings)
        # Then the boot says so, with the numbers
        found = re.search(r"WARNING queued\.django: database 'default': 2 process\(es\) x 1 "
                          r"connection\(s\) = 2 may be open at once, but the server takes "
                          rf"{MAX_CONNECTIONS} \(max_connections\) - 3 reserved - (\d+) open "
                          r"now = (-?\d+) more", d.output())
        assert found, d.output()
        in_use, free = map(int, found.groups())
        assert in_use >= len(held) and free == MAX_CONNECTIONS - 3 - in_use and free < 2
    finally:
        for conn in held:
            conn.close()


def client_backends(conn) -> int:
    """The client backends open now: ``conn`` must be in autocommit, since PostgreSQL keeps
    one pg_stat_activity snapshot for a whole transaction (a second count in the same one
    repeats the first whatever opened meanwhile)."""
    assert conn.autocommit
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                    "'client backend'")
        return cur.fetchone()[0]


def test_two_aliases_on_one_server_are_judged_together_by_what_others_hold(
        daemon, django_db):
    # (each alias was judged alone, with its own headroom, and the second check counted the
    # first check's connection, still open, among the others': red team rt3 #9)
    from pgserver import MAX_CONNECTIONS
    # Given two aliases on one server, and other clients holding all but 3 of its connections
    held = [psycopg.connect(django_db.postgres.dsn("postgres"), autocommit=True)
            for _ in range(MAX_CONNECTIONS - 3 - 3)]
    try:
        others = client_backends(held[0])  # (every client backend now: none is the daemon's)
        # When a daemon of 2 processes boots: 2 x 2 connections (one per alias) may be open
        d = daemon(require=(), cwd=PROJECT, env=django_db.env("djsite.settings_two"),
                   concurrency=2)
        # Then one warning judges the server for both aliases, counting exactly the others'
        # connections (not its own check's)
        out = d.output()
        found = re.findall(r"WARNING queued\.django: databases 'default' and 'other' \(one "
                           r"server\): 2 process\(es\) x 2 connection\(s\) = 4 may be open "
                           rf"at once, but the server takes {MAX_CONNECTIONS} "
                           r"\(max_connections\) - 3 reserved - (\d+) open now = (-?\d+) more",
                           out)
        assert found == [(str(others), str(MAX_CONNECTIONS - 3 - others))], out
        assert "database 'default'" not in out and "database 'other'" not in out
        # And the check's connections are closed: none of the master's is open (a backend
        # leaves pg_stat_activity a moment after its client closes: wait for that)
        wait_for(lambda: client_backends(held[0]) == others, 10,
                 what="the check's connections closed")
        assert d.stop() == 0
    finally:
        for conn in held:
            conn.close()


def test_the_projects_own_testcase_tests_pass_under_djangos_runner(django_db):
    done = subprocess.run([sys.executable, MANAGE, "test", "ledger", "--noinput", "-v", "2"],
                          env={**os.environ, **django_db.env()}, cwd=PROJECT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Ran 5 tests" in done.stderr and "\nOK" in done.stderr


@pytest.mark.parametrize("text", ["import os\n", 'os.environ["X"] = "y"\n'])
def test_a_manage_py_without_the_settings_module_is_a_config_error(tmp_path, text):
    (tmp_path / "manage.py").write_text(text)
    done = subprocess.run([sys.executable, "-m", "queued", "-r", str(tmp_path)],
                          env={**{k: v for k, v in os.environ.items()
                                  if k != "DJANGO_SETTINGS_MODULE"}, "PYTHONPATH": ROOT},
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (
        2, f"queued: {tmp_path}/manage.py does not set DJANGO_SETTINGS_MODULE; set it in the "
           "environment\n")


def test_a_database_down_at_boot_is_reported_and_the_daemon_starts(daemon, django_db):
    from conftest import free_port
    d = daemon(require=(), cwd=PROJECT, env=django_db.env(QUEUED_TEST_PG_PORT=str(free_port())),
               concurrency=1)
    assert re.search(r"WARNING queued\.django: database 'default': could not check "
                     r"max_connections \(OperationalError: .*\)", d.output()), d.output()
    assert len(d.worker_pids()) == 1
    assert d.stop() == 0
