"""queued.config: the Sidekiq YAML dialect, precedence, and one-line errors. No Redis needed."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import textwrap

import pytest
import redis
import yaml

from queued import config
from queued.config import Config, ConfigError

NO_ENV: dict[str, str] = {}

SIDEKIQ_SAMPLE = """\
---
:concurrency: 5
:timeout: 30
:verbose: false
:tag: captag
staging:
  :concurrency: 10
production:
  :concurrency: 20
:queues:
  - critical
  - default
  - low
"""


@pytest.fixture
def write(tmp_path):
    def write(text: str, name: str = "sidekiq.yml") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)
    return write


def load(*argv: str, environ: dict[str, str] | None = None) -> Config:
    return config.load(list(argv), NO_ENV if environ is None else environ)


def error_of(*argv: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load(*argv, environ=environ)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- defaults and the sample file

def test_defaults_without_a_file():
    cfg = load()
    assert cfg.concurrency == (os.cpu_count() or 2)
    assert cfg.queues == (("default", 1),) and cfg.strict
    assert cfg.shutdown_timeout == 25.0
    assert cfg.redis_url == "redis://127.0.0.1:6379/0"
    assert cfg.environment is None and cfg.config_file is None
    assert cfg.job_timeout is None and cfg.log_level == "INFO"


def test_sidekiq_sample_file_parses(write):
    path = write(SIDEKIQ_SAMPLE)
    cfg = load("-C", path)
    assert cfg.config_file == path
    assert cfg.concurrency == 5
    assert cfg.shutdown_timeout == 30.0
    assert cfg.verbose is False and cfg.tag == "captag"
    assert cfg.queues == (("critical", 1), ("default", 1), ("low", 1))
    assert cfg.strict is True
    assert cfg.queue_names == ("critical", "default", "low")


def test_sample_file_with_weights(write):
    path = write("""\
        :queues:
          - [critical, 3]
          - [default, 2]
          - [low, 1]
    """)
    cfg = load("-C", path)
    assert cfg.queues == (("critical", 3), ("default", 2), ("low", 1))
    assert cfg.strict is False
    assert cfg.weighted_queues == ("critical",) * 3 + ("default",) * 2 + ("low",)


def test_both_key_spellings(write):
    colon = load("-C", write(":concurrency: 4\n:job_logging: false\n", "a.yml"))
    plain = load("-C", write("concurrency: 4\njob_logging: false\n", "b.yml"))
    assert colon.concurrency == plain.concurrency == 4
    assert colon.job_logging is plain.job_logging is False


def test_same_key_in_both_spellings_is_an_error(write):
    path = write(":concurrency: 4\nconcurrency: 5\n")
    assert "concurrency" in error_of("-C", path) and "twice" in error_of("-C", path)


def test_empty_file_is_an_empty_config(write):
    assert load("-C", write("")).queues == (("default", 1),)


# --- queues and strictness, exactly as Sidekiq 6.4's parse_queue

@pytest.mark.parametrize("queues, expected, strict", [
    (["a", "b"], (("a", 1), ("b", 1)), True),
    ([["a", 1], ["b", 1]], (("a", 1), ("b", 1)), False),
    ([["a", 3], "b"], (("a", 3), ("b", 1)), False),
    (["a,2", "b,1"], (("a", 2), ("b", 1)), False),
    ([["a", "5"]], (("a", 5),), False),
    ([["a", 0], ["b", 0]], (("a", 0), ("b", 0)), True),
    ([["a"]], (("a", 1),), True),
    ([":critical"], (("critical", 1),), True),
    ([], (("default", 1),), True),
    (None, (("default", 1),), True),
])
def test_queue_forms_and_strictness(queues, expected, strict):
    cfg = config.from_dict({"queues": queues}, environ=NO_ENV)
    assert cfg.queues == expected
    assert cfg.strict is strict


def test_weight_zero_repeats_once():
    cfg = config.from_dict({"queues": [["a", 0], ["b", 2]]}, environ=NO_ENV)
    assert cfg.weighted_queues == ("a", "b", "b")


def test_queue_defined_twice(write):
    path = write("queues: [a, b, [a, 2]]\n")
    assert error_of("-C", path) == f"{path}: queues: a cannot be defined twice"


def test_cli_queue_defined_twice():
    assert "cannot be defined twice" in error_of("-q", "a", "-q", "a,2")


def test_cli_queues_replace_file_queues(write):
    path = write("queues: [[critical, 5], low]\n")
    cfg = load("-C", path, "-q", "x", "-q", "y,1")
    assert cfg.queues == (("x", 1), ("y", 1))
    assert cfg.strict is False
    assert load("-C", path, "-q", "only").strict is True


# --- environment sections

ENV_FILE = """\
:concurrency: 5
:queues: [default]
staging:
  :concurrency: 10
production:
  :concurrency: 20
  :queues:
    - [critical, 2]
    - default
"""


def test_environment_section_by_flag(write):
    path = write(ENV_FILE)
    cfg = load("-C", path, "-e", "production")
    assert cfg.environment == "production"
    assert cfg.concurrency == 20
    assert cfg.queues == (("critical", 2), ("default", 1)) and not cfg.strict
    assert load("-C", path, "-e", "staging").concurrency == 10


def test_environment_section_by_rails_env(write):
    path = write(ENV_FILE)
    assert load("-C", path, environ={"RAILS_ENV": "staging"}).concurrency == 10
    cfg = load("-C", path, environ={"RAILS_ENV": "staging", "APP_ENV": "production"})
    assert cfg.environment == "production" and cfg.concurrency == 20
    assert load("-C", path, "-e", "staging", environ={"APP_ENV": "production"}).concurrency == 10


def test_no_environment_selects_development_like_sidekiq(write):
    path = write("concurrency: 5\ndevelopment:\n  concurrency: 1\n")
    cfg = load("-C", path)
    assert cfg.environment is None and cfg.concurrency == 1


def test_colon_section_name_and_keys_inside_are_validated(write):
    path = write(":production:\n  :concurency: 3\n")
    message = error_of("-C", path, "-e", "production")
    assert message == (f"{path}: unknown key 'production.concurency' "
                       "(did you mean 'concurrency'?)")


def test_a_typo_in_a_section_not_selected_is_an_error_too(write):
    # Sidekiq never looks at the other sections; a typo there surfaced only on the day that
    # environment ran. Every section is checked, selected or not.
    path = write("concurrency: 2\nstaging:\n  concurency: 3\nproduction:\n  timeout: soon\n")
    assert error_of("-C", path) == (f"{path}: unknown key 'staging.concurency' "
                                    "(did you mean 'concurrency'?)")
    path = write("production:\n  timeout: soon\n", "b.yml")
    assert error_of("-C", path).startswith(f"{path}: production.timeout: expected")
    path = write("staging:\n  bogus: 1\n", "c.yml")
    assert error_of("-C", path) == f"{path}: unknown key 'staging.bogus'"


def test_bad_value_inside_section_names_section_and_key(write):
    message = error_of("-C", write("production:\n  timeout: -1\n"), "-e", "production")
    assert "production.timeout" in message and "sidekiq.yml" in message


# --- precedence

def test_cli_over_file_over_defaults(write):
    path = write("concurrency: 3\ntimeout: 8\ntag: filetag\nverbose: true\nrequire: app.py\n"
                 "max_retries: 7\n")
    cfg = load("-C", path, "-c", "9", "-t", "1.5", "-g", "clitag", "-r", "a", "-r", "b")
    assert (cfg.concurrency, cfg.shutdown_timeout, cfg.tag) == (9, 1.5, "clitag")
    assert cfg.require == ("a", "b")
    assert cfg.verbose is True and cfg.log_level == "DEBUG"  # -v absent: file value kept
    assert cfg.max_retries == 7
    assert cfg.prefetch == 32
    assert load("-C", path).require == ("app.py",)


def test_verbose_flag():
    assert load("-v").verbose is True


def test_alias_for_poll_interval():
    cfg = config.from_dict({":average_scheduled_poll_interval": 12}, environ=NO_ENV)
    assert cfg.poll_interval_average == 12.0
    with pytest.raises(ConfigError, match="twice"):
        config.from_dict({"average_scheduled_poll_interval": 1, "poll_interval_average": 2},
                         environ=NO_ENV)


def test_job_timeout_zero_or_null_means_none():
    assert config.from_dict({"job_timeout": 0}, environ=NO_ENV).job_timeout is None
    assert config.from_dict({"job_timeout": None}, environ=NO_ENV).job_timeout is None
    assert config.from_dict({"job_timeout": "2.5"}, environ=NO_ENV).job_timeout == 2.5


# --- redis

def test_redis_url_from_env_and_file(write):
    env = {"REDIS_URL": "redis://envhost:6380/2"}
    assert load(environ=env).redis_url == "redis://envhost:6380/2"
    path = write("redis_url: rediss://filehost/1\n")
    assert load("-C", path).redis_url == "rediss://filehost/1"
    assert config.from_dict({"redis_url": "unix:///tmp/r.sock"}, environ=NO_ENV).redis_url


@pytest.mark.parametrize("url", ["http://x", "localhost:6379", "redis://h:notaport", "unix://", 5])
def test_bad_redis_url(write, url):
    path = write(f"redis_url: {url!r}\n" if isinstance(url, str) else f"redis_url: {url}\n")
    message = error_of("-C", path)
    assert "redis_url" in message and "sidekiq.yml" in message


def test_bad_redis_url_in_environment():
    message = error_of(environ={"REDIS_URL": "http://x"})
    assert "REDIS_URL" in message


def test_paths_resolve_against_the_working_directory_not_the_file(write, tmp_path,
                                                                   monkeypatch):
    # As Sidekiq's: a config in /etc/queued with a systemd WorkingDirectory=/opt/myapp means
    # /opt/myapp/var/redis, not /etc/queued/var/redis
    (tmp_path / "etc").mkdir()
    (tmp_path / "app").mkdir()
    path = write("embedded_redis: data/redis\npidfile: tmp/q.pid\nlogfile: ./log/q.log\n"
                 "require: [./jobs/a.py, app.jobs]\n", "etc/q.yml")
    monkeypatch.chdir(tmp_path / "app")
    cfg = load("-C", path)
    assert cfg.embedded_redis == str(tmp_path / "app" / "data" / "redis")
    assert cfg.pidfile == str(tmp_path / "app" / "tmp" / "q.pid")
    assert cfg.logfile == str(tmp_path / "app" / "log" / "q.log")
    assert cfg.require == ("./jobs/a.py", "app.jobs")  # cli.load_app resolves them the same way
    absolute = write(f"embedded_redis: {tmp_path}/abs\n", "etc/abs.yml")
    assert load("-C", absolute).embedded_redis == f"{tmp_path}/abs"


def test_embedded_redis_relative_to_cwd_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = config.from_dict({"embedded_redis": "r"}, environ=NO_ENV)
    assert cfg.embedded_redis == str(tmp_path / "r")


def test_embedded_redis_conflicts_with_redis_url(write):
    message = error_of("-C", write("embedded_redis: r\nredis_url: redis://h/0\n"))
    assert "embedded_redis" in message and "redis_url" in message and "sidekiq.yml" in message


# --- errors: one line, naming the key and the file

@pytest.mark.parametrize("text, key", [
    ("concurrency: ten", "concurrency"),
    ("concurrency: 0", "concurrency"),
    ("concurrency: 2.5", "concurrency"),
    ("concurrency: true", "concurrency"),
    (":timeout: -1", "timeout"),
    ("timeout: 0", "timeout"),
    ("timeout: soon", "timeout"),
    ("verbose: yes please", "verbose"),
    ("job_logging: 1", "job_logging"),
    ("tag: [a]", "tag"),
    ("queues: critical", "queues"),
    ("queues: [[a, abc]]", "queues"),
    ("queues: [[a, -1]]", "queues"),
    ("queues: ['a,b,c']", "queues"),
    ("queues: ['has space']", "queues"),
    ("queues: [[a, 1, 2]]", "queues"),
    ("queues: [{a: 1}]", "queues"),
    ("queues: {a: 1}", "queues"),
    ("require: [1]", "require"),
    ("labels: {a: b}", "labels"),
    ("namespace: 'a b'", "namespace"),
    ("namespace: ''", "namespace"),
    ("job_timeout: -3", "job_timeout"),
    ("job_timeout: 1e12", "job_timeout"),  # (past what setitimer takes: rt3 #2)
    ("job_timeout: 1" + "0" * 400, "job_timeout"),
    ("lease_timeout: 315360001", "lease_timeout"),
    ("timeout_grace: -1", "timeout_grace"),
    ("lease_timeout: 1", "lease_timeout"),
    ("prefetch: 0", "prefetch"),
    ("max_retries: -1", "max_retries"),
    ("dead_max_jobs: lots", "dead_max_jobs"),
    ("dead_timeout_in_seconds: -1", "dead_timeout_in_seconds"),
    ("max_crashes: 0", "max_crashes"),
    ("scheduler_poll_interval: 0", "scheduler_poll_interval"),
    ("average_scheduled_poll_interval: .nan", "average_scheduled_poll_interval"),
    ("heartbeat_interval: 0", "heartbeat_interval"),
    ("fetch_timeout: -2", "fetch_timeout"),
    ("pidfile: 3", "pidfile"),
    ("log_format: xml", "log_format"),
    ("environment: production", "environment"),
    ("strict: false", "strict"),
])
def test_bad_value_names_key_and_file(write, text, key):
    path = write(text + "\n", "x.yml")
    message = error_of("-C", path)
    assert message.startswith(f"{path}: ")
    assert key in message


def test_error_message_format(write):
    path = write(":concurrency: ten\n")
    assert error_of("-C", path) == f"{path}: concurrency: expected a positive integer, got 'ten'"


def test_weight_error_names_queue(write):
    message = error_of("-C", write("queues: [[critical, abc]]\n"))
    assert "queues" in message and "critical" in message and "'abc'" in message


def test_unknown_key_with_suggestion(write):
    path = write("concurency: 5\n")
    assert error_of("-C", path) == f"{path}: unknown key 'concurency' (did you mean 'concurrency'?)"


def test_unknown_key_without_suggestion(write):
    message = error_of("-C", write("zzzzzz: 1\n"))
    assert "unknown key 'zzzzzz'" in message and "did you mean" not in message


def test_non_string_key(write):
    assert "unknown key" in error_of("-C", write("1: 2\n"))


def test_cli_values_are_validated_too():
    message = error_of("-c", "0")
    assert message.startswith("command line: ") and "concurrency" in message
    assert "timeout" in error_of("-t", "-1")
    assert "weight" in error_of("-q", "a,abc")


def test_bad_flag_is_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        load("-c", "ten")
    assert info.value.code == 2


def test_yaml_syntax_error_gives_line(write):
    path = write("concurrency: 5\nqueues: [a, b\ntag: x: y\n")
    message = error_of("-C", path)
    assert message.startswith(f"{path}: line ") and "YAML" in message


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yml")
    message = error_of("-C", path)
    assert path in message and "cannot read" in message


def test_directory_instead_of_file(tmp_path):
    assert "cannot read" in error_of("-C", str(tmp_path))


@pytest.mark.parametrize("text, kind", [("- a\n- b\n", "list"), ("just text\n", "str")])
def test_non_mapping_top_level(write, text, kind):
    message = error_of("-C", write(text))
    assert "mapping" in message and kind in message and "sidekiq.yml" in message


# --- ERB (queued/erb.py): the forms Rails apps write in sidekiq.yml

RAILS_ERB = """\
:concurrency: <%= ENV.fetch("SIDEKIQ_CONCURRENCY", 3) %>
:timeout: <%= ENV.fetch("SIDEKIQ_TIMEOUT") { 8 } %>
:tag: <%= ENV["APP_NAME"] || "shop" %>
:redis:
  :url: <%= ENV.fetch("REDIS_URL", "redis://127.0.0.1:6379/3") %>
<%# a comment, gone -%>
production:
  :concurrency: <%= ENV.fetch("PROD_CONCURRENCY", "20").to_i %>
"""


def test_erb_defaults_apply_when_the_variables_are_unset(write):
    cfg = load("-C", write(RAILS_ERB))
    assert (cfg.concurrency, cfg.shutdown_timeout, cfg.tag) == (3, 8.0, "shop")
    assert cfg.redis_url == "redis://127.0.0.1:6379/3"


def test_erb_reads_the_environment_with_rubys_meaning(write):
    env = {"SIDEKIQ_CONCURRENCY": "7", "SIDEKIQ_TIMEOUT": "12", "APP_NAME": "",
           "PROD_CONCURRENCY": "11 workers"}
    cfg = load("-C", write(RAILS_ERB), "-e", "production", environ=env)
    # "11 workers".to_i is 11 in Ruby; an empty string is true for ||, so the tag is empty
    assert (cfg.concurrency, cfg.shutdown_timeout, cfg.tag) == (11, 12.0, "")
    assert load("-C", write(RAILS_ERB), environ=env).concurrency == 7


def test_erb_nil_to_i_is_zero_and_zero_processes_is_refused_naming_the_key(write):
    path = write(":concurrency: <%= ENV['NOPE'].to_i %>\n")
    assert error_of("-C", path).startswith(f"{path}: concurrency: expected")


def test_erb_fetch_of_an_unset_variable_names_it_and_the_line(write):
    path = write(':concurrency: 5\n:timeout: <%= ENV.fetch("SIDEKIQ_TIMEOUT") %>\n')
    assert error_of("-C", path) == (
        f'{path}: line 2: <%= ENV.fetch("SIDEKIQ_TIMEOUT") %>: the environment variable '
        "SIDEKIQ_TIMEOUT is not set (ENV.fetch without a default needs it)")


@pytest.mark.parametrize("tag", ['<%= File.read("/etc/passwd") %>', "<%= `id` %>",
                                 '<%= ENV["X"].upcase %>', "<% if true %>",
                                 '<%= system("touch /tmp/pwned") %>'])
def test_erb_outside_the_supported_forms_is_refused_with_the_line_and_the_forms(write, tag):
    path = write(f":concurrency: 5\n:tag: {tag}\n")
    message = error_of("-C", path)
    assert message.startswith(f"{path}: line 2: {tag}: ")
    assert 'supported: ENV["X"], ENV.fetch("X"), ENV.fetch("X", default)' in message


@pytest.mark.parametrize("text, want", [
    ("<%= Integer(ENV.fetch('N', '4')) %>", 4), ("<%= ENV['N'] || 6 %>", 6),
    ("<%= (ENV['N'] || '9').to_i %>", 9), ("<%= ENV.fetch('N') { 2 }.to_i %>", 2),
    ("<%= 5 -%>\n", 5), ("<%= Float('2.5').to_i %>", 2)])
def test_erb_forms(write, text, want):
    assert load("-C", write(f":concurrency: {text}\n")).concurrency == want


def test_erb_strict_integer_of_a_non_number_is_an_error(write):
    path = write(":concurrency: <%= Integer(ENV.fetch('N', 'many')) %>\n")
    assert "Integer('many'): not a valid number" in error_of("-C", path)


def test_erb_literal_percent_tag_is_kept(write):
    cfg = load("-C", write(":tag: 'a <%%= b %>'\n"))
    assert cfg.tag == "a <%= b %>"


def test_from_dict_uses_source_name():
    with pytest.raises(ConfigError, match=r"^mine: prefetch: expected a positive integer"):
        config.from_dict({"prefetch": "x"}, source="mine", environ=NO_ENV)


# --- the object itself

def test_config_is_frozen():
    cfg = load()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.concurrency = 3  # type: ignore[misc]


def test_describe_covers_every_setting():
    rows = config.describe()
    assert [name for name, _, _ in rows] == [f.name for f in dataclasses.fields(Config)]
    assert all(help_text for _, _, help_text in rows)
    assert ("prefetch", 32, config.SETTINGS["prefetch"].help) in rows


def test_parser_flags():
    args = config.build_parser().parse_args(["-V", "-C", "f.yml", "-q", "a", "-q", "b,2", "-v"])
    assert args.version and args.verbose and args.config_file == "f.yml"
    assert args.queues == ["a", "b,2"]
    assert config.build_parser().prog == "queued"


def test_environ_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://fromos:1/0")
    assert config.load([]).redis_url == "redis://fromos:1/0"


@pytest.mark.parametrize("text,beat,lease", [
    ("heartbeat_interval: 4\nlease_timeout: 2", 4, 2),
    ("heartbeat_interval: 2\nlease_timeout: 2", 2, 2),
    ("heartbeat_interval: 20", 20, 30),          # against the default 30 s lease
])
def test_a_heartbeat_must_renew_the_lease_at_least_twice_per_lease(write, text, beat, lease):
    # A beat renews the master's lease; with beats as far apart as the lease, two healthy
    # masters reaped each other's running jobs
    path = write(text + "\n", "x.yml")
    assert error_of("-C", path) == (
        f"{path}: heartbeat_interval ({beat}s) must be at most half of lease_timeout "
        f"({lease}s): each beat renews the lease, and a lease that lapses between beats lets "
        f"other masters take back running jobs")


@pytest.mark.parametrize("text", ["heartbeat_interval: 1\nlease_timeout: 2",
                                  "heartbeat_interval: 15"])
def test_a_heartbeat_of_half_the_lease_is_accepted(write, text):
    assert config.load(["-C", write(text + "\n", "x.yml")], environ={}).heartbeat_interval


# --- where the config comes from: -C's default, and the Redis URL's sources

def test_without_dash_C_config_sidekiq_yml_in_the_working_directory_is_read(tmp_path,
                                                                            monkeypatch):
    # Given an application folder with config/sidekiq.yml, as Sidekiq expects it
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "sidekiq.yml").write_text(":concurrency: 3\n")
    monkeypatch.chdir(tmp_path)
    # When queued runs there without -C
    cfg = load()
    # Then it read that file, and its startup line names it
    assert cfg.config_file == os.path.join("config", "sidekiq.yml") and cfg.concurrency == 3
    assert config.startup_line(cfg).startswith(
        f"config: {tmp_path}/config/sidekiq.yml (no environment section); ")


def test_without_dash_C_or_config_sidekiq_yml_no_file_is_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load()
    assert cfg.config_file is None
    assert config.startup_line(cfg) == (
        f"config: none (no -C, and no config/sidekiq.yml in {tmp_path}); "
        "Redis redis://127.0.0.1:6379/0 from the default")


REDIS_SOURCES = [
    # (file text, argv, environment, URL, source)
    ("", (), {}, "redis://127.0.0.1:6379/0", "the default"),
    ("redis_url: redis://file:1/0\n", (), {}, "redis://file:1/0", "redis_url in the config file"),
    (":redis:\n  :url: redis://file:1/0\n", (), {}, "redis://file:1/0",
     "redis in the config file"),
    ("redis_url: redis://file:1/0\n", (), {"REDIS_URL": "redis://env:2/0"}, "redis://env:2/0",
     "REDIS_URL (redis_url in the config file is not used)"),
    ("redis:\n  url: redis://file:1/0\n", (), {"REDIS_URL": "redis://env:2/0"},
     "redis://env:2/0", "REDIS_URL (redis in the config file is not used)"),
    ("", (), {"REDIS_URL": "redis://env:2/0"}, "redis://env:2/0", "REDIS_URL"),
    ("redis_url: redis://file:1/0\n", ("--redis-url", "redis://cli:3/0"),
     {"REDIS_URL": "redis://env:2/0"}, "redis://cli:3/0",
     "--redis-url (redis_url in the config file is not used)"),
    ("", ("--redis-url", "redis://cli:3/0"), {"REDIS_URL": "redis://env:2/0"},
     "redis://cli:3/0", "--redis-url"),
    ("embedded_redis: r\n", (), {"REDIS_URL": "redis://env:2/0"}, "redis://127.0.0.1:6379/0",
     "embedded_redis (REDIS_URL is not used)"),
]


@pytest.mark.parametrize("text, argv, environ, url, source", REDIS_SOURCES)
def test_redis_url_command_line_over_environment_over_file(write, text, argv, environ, url,
                                                           source):
    # In containers the environment is how Redis is injected: it wins over the file
    cfg = load("-C", write(text), *argv, environ=environ)
    assert (cfg.redis_url, cfg.redis_source) == (url, source)


def test_an_environment_url_that_is_not_used_is_not_checked(write):
    # --redis-url wins, so a REDIS_URL left over from elsewhere is no reason to refuse
    cfg = load("--redis-url", "redis://cli/0", environ={"REDIS_URL": "nonsense"})
    assert cfg.redis_url == "redis://cli/0"
    assert "REDIS_URL" in error_of(environ={"REDIS_URL": "nonsense"})


def test_redis_url_on_the_command_line_is_checked():
    assert error_of("--redis-url", "http://x").startswith("command line: --redis-url: expected")


def test_redis_url_on_the_command_line_with_embedded_redis_is_an_error(write):
    path = write("embedded_redis: r\n")
    message = error_of("-C", path, "--redis-url", "redis://cli/0")
    assert "--redis-url" in message and "embedded_redis" in message and path in message


@pytest.mark.parametrize("cfg_kwargs, line", [
    ({"config_file": "/etc/queued/sidekiq.yml", "environment": "production",
      "section": "production", "redis_url": "redis://:s3cret@host:6379/0",
      "redis_source": "REDIS_URL"},
     "config: /etc/queued/sidekiq.yml (environment production); "
     "Redis redis://:****@host:6379/0 from REDIS_URL"),
    ({"config_file": "/etc/q.yml", "section": "development",
      "redis_url": "rediss://queued:p%40ss@h:6380/1?ssl_ca_certs=%2Fca.pem",
      "redis_source": "redis in the config file"},
     "config: /etc/q.yml (environment development, the default); "
     "Redis rediss://queued:****@h:6380/1?ssl_ca_certs=%2Fca.pem from redis in the config file"),
    ({"config_file": "/etc/q.yml", "environment": "staging",
      "redis_url": "unix:///run/redis.sock?db=2&password=pw", "redis_source": "--redis-url"},
     "config: /etc/q.yml (environment staging: no such section, top level only); "
     "Redis unix:///run/redis.sock?db=2&password=**** from --redis-url"),
])
def test_the_startup_line_names_file_section_and_redis_with_the_password_masked(cfg_kwargs,
                                                                              line):
    assert config.startup_line(Config(**cfg_kwargs)) == line


# --- no silent configuration: every mapping in the file is a setting or a section

def test_an_environment_named_nearly_like_a_section_is_an_error_naming_both(write):
    # A typo `prodution:` used to run production on the top-level values without a word
    path = write("concurrency: 2\nprodution:\n  concurrency: 20\n")
    expected = (f"{path}: no section for environment 'production' (from {{}}); "
                "did you mean the section 'prodution'?")
    assert error_of("-C", path, "-e", "production") == expected.format("-e")
    assert error_of("-C", path, environ={"RAILS_ENV": "production"}) == expected.format(
        "RAILS_ENV")


def test_an_environment_named_by_e_without_a_section_is_an_error_naming_the_sections(write):
    # -e prod against a file with sections is a typo or the wrong file: it used to start on
    # the top level alone, with only a note in the startup line
    path = write("concurrency: 2\nstaging:\n  concurrency: 20\nproduction:\n  concurrency: 9\n")
    assert error_of("-C", path, "-e", "prod") == (
        f"{path}: no section for environment 'prod' (from -e); the file's sections are "
        "'staging', 'production'")


def test_an_environment_named_by_e_on_a_file_without_sections_runs_on_the_top_level(write):
    path = write("concurrency: 2\n")
    cfg = load("-C", path, "-e", "production")
    assert (cfg.concurrency, cfg.environment, cfg.section) == (2, "production", None)
    assert "(environment production: no such section, top level only)" in (
        config.startup_line(cfg))


def test_an_environment_from_rails_env_without_a_section_runs_on_the_top_level_as_sidekiq(write):
    # One RAILS_ENV serves the whole app (a review app's "review"), so Sidekiq's fallback stays
    path = write("concurrency: 2\nstaging:\n  concurrency: 20\n")
    cfg = load("-C", path, environ={"RAILS_ENV": "review"})
    assert (cfg.concurrency, cfg.environment, cfg.section) == (2, "review", None)
    assert "(environment review: no such section, top level only)" in config.startup_line(cfg)


@pytest.mark.parametrize("text, message", [
    ("sidekiq_cron:\n  nightly: {cron: '0 3 * * *', class: Nightly}\n",
     "unknown key 'sidekiq_cron' (a mapping, but not an environment section: 'nightly' is "
     "not a setting)"),
    ("reddis:\n  url: redis://h/0\n", "unknown key 'reddis' (did you mean 'redis'?)"),
    ("production:\n  concurrency: 2\n  zzz: 1\n", "unknown key 'production.zzz'"),
])
def test_a_mapping_that_is_not_a_section_is_an_error_naming_its_key(write, text, message):
    path = write(text)
    assert error_of("-C", path) == f"{path}: {message}"


# --- periodic jobs: sidekiq-scheduler's block

#: The sidekiq.yml of a Rails app using sidekiq-scheduler, as it is (only its Redis host is ours).
RAILS_SIDEKIQ_YML = """\
---
:verbose: false
:concurrency: 10
:timeout: 25
:queues:
  - critical
  - default
  - mailers
  - low
production:
  :concurrency: 20
:scheduler:
  :schedule:
    refresh_exchange_rates:
      cron: '0 */15 * * * *'   # every 15 minutes, on the second 0
      class: ExchangeRates::RefreshJob
      queue: critical
      description: "Pull the ECB rates"
    daily_digest:
      cron: '0 0 7 * * * Europe/Berlin'
      class: DigestMailerJob
      queue: mailers
      args: ['daily', {with_stats: true}]
      description: "Morning digest, Berlin time"
    purge_sessions:
      every: '1h'
      class: PurgeSessionsJob
      queue: low
    heartbeat:
      every: 30s
      class: HeartbeatJob
      queue: low
      args: ping
    weekly_report:
      cron: '30 6 * * 1 America/New_York'
      class: Reports::WeeklyJob
      queue: low
      enabled: false
      description: "Monday report (off until finance signs off)"
"""


def test_a_rails_apps_sidekiq_scheduler_block_is_taken_as_it_is(write):
    cfg = load("-C", write(RAILS_SIDEKIQ_YML), "-e", "production")
    by_name = {s.name: s for s in cfg.schedules}
    assert list(by_name) == ["refresh_exchange_rates", "daily_digest", "purge_sessions",
                             "heartbeat", "weekly_report"]
    digest = by_name["daily_digest"]
    assert (digest.klass, digest.queue, digest.args, digest.timing.zone, digest.timing.expr) == (
        "DigestMailerJob", "mailers", ("daily", {"with_stats": True}), "Europe/Berlin",
        "0 0 7 * * *")
    assert by_name["heartbeat"].args == ("ping",) and by_name["heartbeat"].timing.seconds == 30
    assert by_name["purge_sessions"].timing.seconds == 3600
    assert by_name["weekly_report"].enabled is False
    assert by_name["refresh_exchange_rates"].description == "Pull the ECB rates"
    # 7:00 in Berlin is 5:00 UTC in summer
    assert digest.timing.next_after(1719792000.0) == 1719810000.0  # 2024-07-01 00:00 -> 05:00 UTC


def test_the_older_top_level_schedule_form_is_read_too(write):
    cfg = load("-C", write(":schedule:\n  nightly:\n    cron: '0 3 * * *'\n    class: Nightly\n"))
    assert [(s.name, s.klass, s.timing.text) for s in cfg.schedules] == [
        ("nightly", "Nightly", "0 3 * * *")]


@pytest.mark.parametrize("text, message", [
    (":scheduler:\n  :schedule:\n    a: {cron: '0 3 * * *', class: A, queu: low}\n",
     "unknown key 'scheduler.schedule.a.queu' (did you mean 'scheduler.schedule.a.queue'?)"),
    (":scheduler:\n  :schedule:\n    a: {cron: '0 3 * *', class: A}\n",
     "scheduler.schedule.a.cron: not a valid cron expression: '0 3 * *'"),
    (":scheduler:\n  :schedule:\n    a: {cron: '0 3 * * * Europe/Berln', class: A}\n",
     "scheduler.schedule.a.cron: unknown time zone 'Europe/Berln' in '0 3 * * * Europe/Berln'"),
    (":scheduler:\n  :schedule:\n    a: {every: 5 minutes, class: A}\n",
     "scheduler.schedule.a.every: expected an interval such as '30s'"),
    (":scheduler:\n  :schedule:\n    a: {class: A}\n",
     "scheduler.schedule.a: give one of cron: or every:"),
    (":scheduler:\n  :schedule:\n    a: {in: 1h, class: A}\n",
     "scheduler.schedule.a.in: not supported: one-off schedules"),
    (":scheduler:\n  :dynamic: true\n", "scheduler.dynamic: not supported"),
    (":scheduler:\n  :schedule:\n    a: {every: 1d, class: A, args: [2024-01-01]}\n",
     "scheduler.schedule.a.args: must be plain JSON"),
    ("production:\n  :schedule:\n    a: {cron: '0 3 * * *', clas: A}\n",
     "unknown key 'production.schedule.a.clas' (did you mean 'production.schedule.a.class'?)"),
    (":schedule:\n  a: {cron: '0 3 * * *'}\n:scheduler:\n  :schedule:\n    b: {every: 1h}\n",
     "schedule: give the periodic jobs once, under scheduler.schedule"),
])
def test_a_bad_schedule_is_an_error_naming_key_and_file(write, text, message):
    path = write(text)
    assert error_of("-C", path, "-e", "production").startswith(f"{path}: {message}")


# --- Sidekiq's :redis: mapping

def test_the_redis_mapping_is_honoured(write):
    # It used to be taken for an environment section and ignored: queued went to 127.0.0.1
    path = write("""\
        :redis:
          :url: redis://redis.internal:6390/0
          :username: app
          :password: "p@ss word"
          :db: 3
          :connect_timeout: 2.5
    """)
    cfg = load("-C", path)
    assert cfg.redis_url == ("redis://app:p%40ss%20word@redis.internal:6390/3"
                             "?socket_connect_timeout=2.5")
    assert cfg.redis_source == "redis in the config file"
    kwargs = redis.ConnectionPool.from_url(cfg.redis_url).connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("redis.internal", 6390, 3)
    assert (kwargs["username"], kwargs["password"]) == ("app", "p@ss word")
    assert kwargs["socket_connect_timeout"] == 2.5


def test_the_redis_mapping_with_tls(write):
    path = write("""\
        redis:
          url: redis://:urlpass@tls.example:6380
          ssl: true
          ssl_params: {ca_file: /etc/ca.pem, cert: c.pem, key: k.pem, verify_mode: 0}
    """)
    cfg = load("-C", path)
    pool = redis.ConnectionPool.from_url(cfg.redis_url)
    assert pool.connection_class is redis.SSLConnection
    kwargs = pool.connection_kwargs
    assert kwargs["password"] == "urlpass"  # the URL's own part, when the mapping has none
    assert (kwargs["ssl_ca_certs"], kwargs["ssl_certfile"], kwargs["ssl_keyfile"],
            kwargs["ssl_cert_reqs"]) == ("/etc/ca.pem", "c.pem", "k.pem", "none")


def test_the_redis_mapping_in_a_unix_socket_url_keeps_the_db_in_the_query():
    cfg = config.from_dict({"redis": {"url": "unix:///run/r.sock", "db": 4}}, environ=NO_ENV)
    assert redis.ConnectionPool.from_url(cfg.redis_url).connection_kwargs["db"] == 4


@pytest.mark.parametrize("redis_block, message", [
    ({"urll": "redis://h"}, "unknown key 'redis.urll' (did you mean 'redis.url'?)"),
    ({"url": "redis://h", "zzz": 1}, "unknown key 'redis.zzz'"),
    ({"ssl": True, "ssl_params": {"ca_fil": "x"}},
     "unknown key 'redis.ssl_params.ca_fil' (did you mean 'redis.ssl_params.ca_file'?)"),
    ({"network_timeout": 5}, "redis.network_timeout: not supported: queued sets its own read "
                             "timeouts (a blocking fetch waits up to fetch_timeout)"),
    ({"db": -1}, "redis.db: expected an integer >= 0, got -1"),
    ({"password": 1234}, "redis.password: expected a string (quote a number), got 1234"),
    ({"url": "http://h"},
     "redis.url: expected a redis://, rediss://, unix:// or redis+sentinel:// URL"),
    ({"ssl_params": {"ca_file": "x"}}, "redis.ssl_params: needs TLS: a rediss:// redis.url, "
                                       "or ssl: true"),
    ({"ssl": True, "ssl_params": {"verify_mode": "sometimes"}},
     "redis.ssl_params.verify_mode: expected none, optional, required"),
    ({"url": "unix:///r.sock", "ssl": True}, "redis.ssl: true, but redis.url is a unix://"),
    ("redis://h/0", "redis: expected a mapping of redis options"),
])
def test_a_bad_redis_mapping_is_an_error_naming_the_sub_key(write, redis_block, message):
    path = write(f"redis: {json.dumps(redis_block)}\n")
    assert error_of("-C", path).startswith(f"{path}: {message}")


@pytest.mark.parametrize("text, other", [
    ("redis_url: redis://a/0\nredis: {url: redis://b/0}\n", "redis_url"),
    ("redis_url: redis://a/0\nproduction:\n  redis: {password: x}\n", "redis_url"),
])
def test_the_redis_mapping_and_redis_url_together_are_an_error(write, text, other):
    path = write(text)
    assert error_of("-C", path, "-e", "production") == (
        f"{path}: redis: cannot be set together with redis_url (both say which Redis to use; "
        "keep one)")


def test_the_redis_mapping_with_embedded_redis_is_an_error(write):
    path = write("embedded_redis: r\nredis: {password: x}\n")
    assert error_of("-C", path) == (f"{path}: embedded_redis: cannot be set together with "
                                    "redis (queued starts its own Redis)")


# --- a process that serves no jobs

def test_serve_no_jobs_means_no_workers(write):
    cfg = load("-C", write("concurrency: 4\nserve_no_jobs: true\n"))
    assert cfg.serve_no_jobs is True and cfg.concurrency == 0
    assert load("--serve-no-jobs").concurrency == 0
    assert load().serve_no_jobs is False


# --- what --help and etc/sidekiq.yml say

def test_help_says_how_paths_and_the_redis_url_resolve():
    text = " ".join(config.build_parser().format_help().split())
    assert "resolve against the working directory, as Sidekiq's do" in text
    assert "-r app.jobs imports as python -m would" in text
    assert "--redis-url, else $REDIS_URL, else redis_url or redis: in the file" in text
    assert "without -C, config/sidekiq.yml in the working directory" in text


def test_help_lists_the_signals_and_the_sentinel_url():
    text = " ".join(config.build_parser().format_help().split())
    assert "redis+sentinel://host:port,.../service_name for Redis Sentinel" in text
    assert ("Signals to the master: TERM/INT stop gracefully, TSTP/USR1 quiet, HUP rolling "
            "restart (new job code and config, workers replaced one at a time), TTIN dump each "
            "worker's job and stack, USR2 reopen the logfile (docs/operating.md).") in text


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "etc",
                       "sidekiq.yml")
#: A setting line of etc/sidekiq.yml, active or commented out (`# key: value`), and the lines
#: of a commented-out mapping under it.
SETTING_LINE = re.compile(r"^(# )?(:?[a-z_]+):(?: (.*))?$")


def example_settings() -> dict[str, tuple[bool, str]]:
    """{setting name: (commented out, its YAML as a one-key document)} of etc/sidekiq.yml."""
    found: dict[str, tuple[bool, str]] = {}
    lines = open(EXAMPLE).read().splitlines()
    for i, line in enumerate(lines):
        match = SETTING_LINE.match(line)
        if not match:
            continue
        commented, key = bool(match.group(1)), match.group(2).lstrip(":")
        name = config.ALIASES.get(key, key)
        if name not in config.SETTINGS:
            continue  # an environment section, say
        block = [line[2:] if commented else line]
        for more in lines[i + 1:]:  # a mapping or list written under the key
            if commented and more.startswith("#   "):
                block.append(more[2:])
            elif not commented and more.startswith("  "):
                block.append(more)
            else:
                break
        assert name not in found, f"etc/sidekiq.yml lists {name} twice"
        found[name] = (commented, "\n".join(block) + "\n")
    return found


def test_the_example_config_lists_every_setting_of_the_table():
    # It promised "every setting" and left out ten; the table is the truth
    listed = example_settings()
    in_file = [name for name, s in config.SETTINGS.items() if not s.not_in_file]
    assert sorted(set(in_file) - set(listed)) == []


def test_each_example_value_is_valid_and_commented_ones_show_the_default():
    for name, (commented, text) in example_settings().items():
        value = config.from_dict(yaml.safe_load(text), environ=NO_ENV)
        default = config.SETTINGS[name].default
        if commented and default not in (None, (), ""):
            got = getattr(value, name)
            assert got == default, f"etc/sidekiq.yml shows {name}: {got!r}, default {default!r}"


def test_the_example_config_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load("-C", EXAMPLE, "-e", "production")
    assert cfg.section == "production" and cfg.require == ("./app/jobs.py",)


# --- queue groups (issue 17) ---------------------------------------------------------------------

def test_queue_groups_have_their_own_processes_threads_and_queues():
    cfg = config.from_dict({"concurrency": 1, "queues": ["default"], "groups": {
        "cpu": {"queues": ["reports"], "concurrency": 2},
        ":io": {":queues": ["mailers", ["webhooks", 2]], "concurrency": 2, "threads": 25}}},
        environ=NO_ENV)
    top, cpu, io = cfg.worker_groups
    assert (top.name, top.queue_names, top.concurrency, top.threads) == ("", ("default",), 1, 1)
    assert (cpu.queue_names, cpu.strict, cpu.concurrency, cpu.threads) == (
        ("reports",), True, 2, 1)
    assert (io.queue_names, io.strict, io.weighted_queues, io.threads) == (
        ("mailers", "webhooks"), False, ("mailers", "webhooks", "webhooks"), 25)
    assert cfg.queue_names == ("default", "reports", "mailers", "webhooks")
    assert (cfg.process_count, cfg.jobs_at_once, cfg.max_threads) == (5, 53, 25)


def test_a_group_that_takes_default_leaves_the_top_level_without_workers():
    cfg = config.from_dict({"groups": {"io": {"queues": ["default"], "threads": 5}}},
                           environ=NO_ENV)
    assert cfg.queues == () and [g.name for g in cfg.worker_groups] == ["io"]
    assert (cfg.process_count, cfg.jobs_at_once) == (1, 5)


@pytest.mark.parametrize("groups,top,message", [
    ({"a": {"queues": ["x"]}, "b": {"queues": ["x"]}}, None,
     "groups.b.queues: queue 'x' is in groups a and b; a queue belongs to one group"),
    ({"a": {"queues": ["x"]}}, ["x"],
     "groups.a.queues: queue 'x' is in the top-level queues and in group a"),
    ({"a": {"queus": ["x"]}}, None, "unknown key 'groups.a.queus' (did you mean"),
    ({"a": {"concurrency": 2}}, None, "groups.a.queues: a group needs its queues"),
    ({"a": {"queues": ["x"], "threads": 0}}, None,
     "groups.a.threads: expected a positive integer, got 0"),
    (["x"], None, "groups: expected a mapping of group name"),
])
def test_bad_groups_name_the_key(groups, top, message):
    data = {"groups": groups, **({"queues": top} if top else {})}
    with pytest.raises(config.ConfigError) as e:
        config.from_dict(data, source="/etc/queued/sidekiq.yml", environ=NO_ENV)
    assert str(e.value).startswith("/etc/queued/sidekiq.yml: ") and message in str(e.value)


def test_threads_from_the_file_and_the_command_line(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text(":concurrency: 2\n:threads: 10\n")
    assert (load("-C", str(path)).threads, load("-C", str(path)).jobs_at_once) == (10, 20)
    assert load("-C", str(path), "--threads", "25").jobs_at_once == 50
    path.write_text("threads: 0\n")
    with pytest.raises(config.ConfigError) as e:
        load("-C", str(path))
    assert "threads: expected a positive integer, got 0" in str(e.value)
