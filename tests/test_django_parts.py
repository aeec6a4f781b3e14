"""queued.django's parts that need no database: finding the project (no Django imported), the
max_connections arithmetic, and manage.py's options taken out of queued's flags."""
import subprocess
import sys

import pytest

from queued.django.dbcheck import assess, assess_server
from queued.django.project import Project, find
from queued.errors import ConfigError
from conftest import ROOT


def test_no_project_named_means_no_django(tmp_path):
    assert find(["app/jobs.py", "app.jobs"], str(tmp_path), {}) is None
    assert find(None, str(tmp_path), {}) is None


def test_the_settings_module_from_the_environment_or_a_manage_py(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "manage.py").write_text(
        'import os\nos.environ.setdefault(\n    "DJANGO_SETTINGS_MODULE", \'mysite.settings\')\n')
    site = str(tmp_path / "site")
    assert find(["x.py"], str(tmp_path), {"DJANGO_SETTINGS_MODULE": "a.b"}) == Project(
        "a.b", str(tmp_path), ())
    assert find(["site", "x.py"], str(tmp_path), {}) == Project(
        "mysite.settings", site, ("site",))
    assert find([f"{site}/manage.py"], "/", {}) == Project(
        "mysite.settings", site, (f"{site}/manage.py",))
    # the environment wins over manage.py's default, as manage.py's setdefault lets it
    assert find(["site"], str(tmp_path), {"DJANGO_SETTINGS_MODULE": "other.settings"}) == \
        Project("other.settings", site, ("site",))
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "manage.py").write_text("print('hi')\n")
    with pytest.raises(ConfigError, match="bare/manage.py does not set DJANGO_SETTINGS_MODULE"):
        find(["bare"], str(tmp_path), {})


def test_finding_a_project_imports_no_django():
    code = ("import sys, queued, queued.client, queued.django.project, queued.testing; "
            "queued.django.project.find(['x'], '/', {}); "
            "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": ROOT}, timeout=60, cwd="/")
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_the_connections_the_workers_need_against_what_the_server_has():
    # 4 processes x 1 thread, 100 allowed, 3 reserved, 90 open elsewhere: 7 free < 4? no
    assert assess("default", 4, 1, None, 100, 3, 90) == []
    assert assess("default", 8, 1, None, 100, 3, 90) == [
        "database 'default': 8 process(es) x 1 connection(s) = 8 may be open at once, but the "
        "server takes 100 (max_connections) - 3 reserved - 90 open now = 7 more"]
    assert assess("db2", 2, 10, None, 100, 3, 80) == [
        "database 'db2': 2 process(es) x 10 connection(s) = 20 may be open at once, but the "
        "server takes 100 (max_connections) - 3 reserved - 80 open now = 17 more"]
    # an unknown server limit (SQLite, Oracle...): nothing to say without a pool
    assert assess("default", 50, 1, None, None) == []


def test_aliases_on_one_server_are_judged_together():
    # 6 processes x 10 threads on two aliases: 120 at once, where each alone (60) fit in 97
    assert assess_server([("default", None), ("replica", None)], 6, 10, 200, 3, 100) == [
        "databases 'default' and 'replica' (one server): 6 process(es) x 20 connection(s) = "
        "120 may be open at once, but the server takes 200 (max_connections) - 3 reserved - "
        "100 open now = 97 more"]
    assert assess("default", 6, 10, None, 200, 3, 100) == []
    # a pool's note stays its alias's; the server's need adds each alias's own
    assert assess_server([("a", {"max_size": 2}), ("b", None), ("c", None)], 2, 4, 20, 0,
                         10) == [
        "database 'a': its pool holds at most 2 connection(s) per process for 4 job "
        "thread(s): jobs will wait for a connection",
        "databases 'a', 'b' and 'c' (one server): 2 process(es) x 12 connection(s) = 24 may "
        "be open at once, but the server takes 20 (max_connections) - 0 reserved - 10 open "
        "now = 10 more"]  # (a's pool opens min_size 4 at least: 4 + 4 + 4 a process)


def test_a_pool_counts_its_size_per_process_and_must_hold_every_thread():
    assert assess("default", 2, 8, {"min_size": 2, "max_size": 4}, None) == [
        "database 'default': its pool holds at most 4 connection(s) per process for 8 job "
        "thread(s): jobs will wait for a connection"]
    assert assess("default", 3, 1, True, 20, 3, 6) == [
        "database 'default': 3 process(es) x 4 connection(s) = 12 may be open at once, but "
        "the server takes 20 (max_connections) - 3 reserved - 6 open now = 11 more"]
    assert assess("default", 3, 2, {"max_size": 2}, 100) == []


def test_manage_py_options_are_taken_out_of_queueds_flags():
    from queued.django.management.commands.queued import _without_django_options
    assert _without_django_options(["--settings", "a.b", "-c", "2", "--pythonpath=/x", "-v",
                                    "--settings=c.d", "-q", "low"]) == ["-c", "2", "-v", "-q",
                                                                       "low"]
