"""Booting from an application's own layout, as Sidekiq users lay it out: paths against the
working directory (from a shell, and from the shipped systemd unit and config), config/sidekiq.yml
without -C, the Redis URL's source, and no daemon that serves nothing by mistake.

These daemons run as the installed ``queued`` console script does (``console=True``): its
sys.path does not start with the working directory, as ``python -m`` does."""
import json
import os
import re
import shutil
import textwrap

import pytest
import yaml
from conftest import free_port
from harness import ROOT, Daemon, wait_for

import queued

APP_JOBS = """\
import queued


class AppJob(queued.Job):
    def perform(self, mark):
        queued.get_redis().rpush("t:app", mark)
"""


def write(path, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return str(path)


def make_app(root, config_text: str | None = None) -> str:
    """An application folder: app/jobs.py (class AppJob) and, if given, config/sidekiq.yml."""
    write(os.path.join(root, "app", "jobs.py"), APP_JOBS)
    if config_text is not None:
        write(os.path.join(root, "config", "sidekiq.yml"), config_text)
    return str(root)


@pytest.fixture
def run(tmp_path):
    """``run(redis_url, args, cwd, env)``: a console-script daemon, stopped at teardown (TERM:
    its workers exit before it does, so none is left blocked on a queue the next test uses)."""
    started = []

    def start(redis_url, args, cwd, env=None):
        d = Daemon(redis_url, tmp_path, args=args, cwd=cwd, env=env, console=True)
        started.append(d)
        return d.start(wait=False)

    yield start
    for d in started:
        try:
            d.stop(15)
        finally:
            d.cleanup()


def booted(d) -> None:
    """Wait until the daemon serves (a worker and its process record), or fail with its output
    if it exited instead."""
    wait_for(lambda: d.proc.poll() is not None or (d.worker_pids() and d.identity()), 20,
             what="the daemon to boot or exit")
    assert d.proc.poll() is None, d.output()


def runs_a_job(d, r) -> None:
    queued.Client(url=d.redis_url).push({"class": "AppJob", "args": ["ran"]})
    wait_for(lambda: r.lrange("t:app", 0, -1) == [b"ran"], 10, what="AppJob to run")


def one_line(text):
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# --- paths resolve against the working directory

@pytest.mark.parametrize("config_text, extra", [
    (":concurrency: 1\n:require: ./app/jobs.py\n", ()),
    (":concurrency: 1\n", ("-r", "app/jobs.py")),
    (":concurrency: 1\n", ("-r", "app.jobs")),
], ids=["require in the file", "-r file", "-r module"])
def test_job_code_paths_resolve_against_the_working_directory(redis_url, r, tmp_path, run,
                                                              config_text, extra):
    # Given an application laid out as Sidekiq expects, config/sidekiq.yml beside app/
    root = make_app(tmp_path / "myapp", config_text)
    # When queued runs from its folder as `queued -C config/sidekiq.yml [-r ...]`
    d = run(redis_url, ("-C", "config/sidekiq.yml", *extra), root, {"REDIS_URL": redis_url})
    # Then it found myapp/app/jobs.py (not myapp/config/app/jobs.py) and runs its jobs
    booted(d)
    runs_a_job(d, r)
    assert "jobs: AppJob" in d.output()


def systemd_unit() -> tuple[str, list[str]]:
    """The shipped unit's WorkingDirectory and ExecStart arguments."""
    with open(os.path.join(ROOT, "systemd", "queued.service")) as f:
        text = f.read()
    workdir = re.search(r"^WorkingDirectory=(\S+)$", text, re.M).group(1)
    argv = re.search(r"^ExecStart=(.+)$", text, re.M).group(1).split()
    assert os.path.basename(argv[0]) == "queued"
    return workdir, argv[1:]


def test_the_shipped_unit_and_config_find_the_job_code_in_the_working_directory(
        redis_url, r, tmp_path, run):
    # Given the shipped systemd unit and etc/sidekiq.yml installed as the unit expects (under
    # tmp_path standing for /): the config in /etc/queued, the application in WorkingDirectory
    workdir, argv = systemd_unit()
    fake_root = str(tmp_path / "root")
    config_path = argv[argv.index("-C") + 1]
    os.makedirs(os.path.dirname(fake_root + config_path))
    shutil.copy(os.path.join(ROOT, "etc", "sidekiq.yml"), fake_root + config_path)
    app = make_app(fake_root + workdir)
    args = [fake_root + a if a == config_path else a for a in argv]
    # When systemd starts it (one worker here; Redis through the unit's REDIS_URL variable)
    d = run(redis_url, (*args, "-c", "1"), app, {"REDIS_URL": redis_url})
    # Then `:require: ./app/jobs.py` is WorkingDirectory/app/jobs.py, not /etc/queued/app/...
    booted(d)
    runs_a_job(d, r)
    assert (f"config: {fake_root + config_path} (environment production); Redis {redis_url} "
            "from REDIS_URL") in d.output()


def test_plain_queued_reads_config_sidekiq_yml_and_says_so(redis_url, r, tmp_path, run):
    # Given an application folder with config/sidekiq.yml
    root = make_app(tmp_path / "myapp", ":concurrency: 1\n:require: ./app/jobs.py\n")
    # When `queued` runs there with no -C
    d = run(redis_url, (), root, {"REDIS_URL": redis_url})
    # Then it read that file (its require is loaded) and its first line names the file
    booted(d)
    runs_a_job(d, r)
    assert (f"config: {root}/config/sidekiq.yml (no environment section); Redis {redis_url} "
            "from REDIS_URL") in d.output()


# --- what the daemon serves

def test_no_job_class_refuses_to_start_with_exit_4(daemon, r):
    # Given a job waiting, and a config with no job code
    r.lpush("queue:refusal", '{"class":"AppJob","args":[],"jid":"a1","queue":"refusal"}')
    d = daemon(require=(), queues=["refusal"], wait=False)
    # Then queued exits 4 with one line, before taking any job to retry as an unknown class
    assert d.wait(15) == 4
    assert one_line(d.output()) == (
        "queued: no job classes: no job code is given. Pass the job code with -r or "
        ":require:, or set serve_no_jobs: true for a process that only schedules and recovers")
    assert r.llen("queue:refusal") == 1 and r.zcard("retry") == 0
    assert r.smembers("processes") == set()


def test_serve_no_jobs_runs_the_scheduler_without_workers(daemon, r):
    # Given a process that says it serves no jobs, without job code
    d = daemon(require=(), serve_no_jobs=True, queues=["due"], wait=False)
    wait_for(lambda: d.identity(), 15, what="the process record")
    d.wait_log("serve_no_jobs: no workers; this process schedules and recovers only")
    # When a scheduled job comes due
    r.zadd("schedule", {'{"class":"AppJob","args":[],"jid":"s1","queue":"due"}': 1})
    # Then this process moves it onto its queue, and leaves it there: it has no worker
    wait_for(lambda: [json.loads(j)["jid"] for j in r.lrange("queue:due", 0, -1)] == ["s1"],
             10, what="the due job on its queue")
    assert d.worker_pids() == []
    assert d.proc.poll() is None


def test_two_classes_under_one_job_name_stop_the_boot_naming_both(daemon, tmp_path):
    # Given job code where two modules define a job named "Dup"
    for name in ("billing_jobs", "mail_jobs"):
        write(tmp_path / f"{name}.py", "import queued\n\n\nclass Dup(queued.Job):\n"
                                       "    def perform(self):\n        pass\n")
    d = daemon(require=(str(tmp_path / "billing_jobs.py"), str(tmp_path / "mail_jobs.py")),
               wait=False)
    # Then the boot stops (exit 4) with one line naming both classes and where the second is
    assert d.wait(15) == 4
    line = one_line(d.output())
    assert line.startswith("queued: cannot load job code ")
    assert ("JobNameClash: job name 'Dup' is taken by two classes: billing_jobs.Dup and "
            "mail_jobs.Dup") in line
    assert f"{tmp_path}/mail_jobs.py:4)" in line


# --- the Redis URL

def test_redis_url_from_the_environment_wins_over_the_file_and_is_logged_masked(
        redis_server, r, tmp_path, run):
    # Given a file whose redis_url is nobody's, and the real Redis (with a password) injected
    # through REDIS_URL, as containers do
    dead = f"redis://127.0.0.1:{free_port()}/0"
    url = f"redis://default:s3cret@127.0.0.1:{redis_server.port}/0"
    root = make_app(tmp_path / "myapp", yaml.safe_dump({
        "redis_url": dead, "concurrency": 1, "require": "./app/jobs.py"}))
    d = run(url, ("-C", "config/sidekiq.yml"), root, {"REDIS_URL": url})
    # Then queued uses the environment's Redis, and its first line says so, password masked
    booted(d)
    runs_a_job(d, r)
    masked = f"redis://default:****@127.0.0.1:{redis_server.port}/0"
    assert (f"config: {root}/config/sidekiq.yml (no environment section); Redis {masked} from "
            "REDIS_URL "
            "(redis_url in the config file is not used)") in d.output()
    assert "s3cret" not in d.output()


def test_the_redis_mapping_in_the_file_is_used(redis_url, r, tmp_path, run):
    # Given Sidekiq's `:redis: {url: ...}` (it used to be taken for an environment section, and
    # queued went to 127.0.0.1:6379)
    root = make_app(tmp_path / "myapp", yaml.safe_dump({
        ":redis": {":url": redis_url}, ":concurrency": 1, ":require": "./app/jobs.py"}))
    d = run(redis_url, ("-C", "config/sidekiq.yml"), root)
    booted(d)
    runs_a_job(d, r)
    assert f"Redis {redis_url} from redis in the config file" in d.output()


# --- a Rails app's sidekiq.yml with ERB (issue 20)

RAILS_SIDEKIQ_ERB = """\
:concurrency: <%= ENV.fetch("SIDEKIQ_CONCURRENCY", 1) %>
:require: ./app/jobs.py
:redis:
  :url: <%= ENV.fetch("QUEUED_TEST_REDIS") %>
production:
  :tag: <%= ENV["APP_NAME"] || "shop" %>
"""


def test_a_rails_sidekiq_yml_with_erb_boots_with_the_environments_values(redis_url, r, tmp_path,
                                                                          run):
    # Given the ERB a Rails app writes, with its variables set in the unit's environment
    root = make_app(tmp_path / "myapp", RAILS_SIDEKIQ_ERB)
    d = run(redis_url, ("-C", "config/sidekiq.yml", "-e", "production"), root,
            {"SIDEKIQ_CONCURRENCY": "3", "QUEUED_TEST_REDIS": redis_url})
    # Then it runs 3 workers on that Redis, tagged with the default, and runs a job
    booted(d)
    wait_for(lambda: len(d.worker_pids()) == 3, 15, what="three workers")
    info = json.loads(r.hget(d.identity(), "info"))
    assert (info["concurrency"], info["tag"]) == (3, "shop")
    runs_a_job(d, r)


def test_erb_naming_an_unset_variable_stops_the_boot_with_one_line_and_exit_2(redis_url, tmp_path,
                                                                               run):
    root = make_app(tmp_path / "myapp", RAILS_SIDEKIQ_ERB)
    d = run(redis_url, ("-C", "config/sidekiq.yml"), root, {})
    assert d.proc.wait(20) == 2
    assert one_line(d.output()) == (
        'queued: config/sidekiq.yml: line 4: <%= ENV.fetch("QUEUED_TEST_REDIS") %>: the '
        "environment variable QUEUED_TEST_REDIS is not set (ENV.fetch without a default needs it)")
