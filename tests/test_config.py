"""queued.config: the Sidekiq YAML dialect, precedence, and one-line errors. No Redis needed."""
from __future__ import annotations

import dataclasses
import os
import textwrap

import pytest

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
    assert load("-C", path, "-e", "test").concurrency == 5


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
    assert "concurency" in message and "did you mean 'concurrency'" in message
    assert load("-C", path).concurrency  # other sections are not looked at


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
    assert cfg.prefetch == 8
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
    assert load("-C", path, environ=env).redis_url == "rediss://filehost/1"
    assert config.from_dict({"redis_url": "unix:///tmp/r.sock"}, environ=NO_ENV).redis_url


@pytest.mark.parametrize("url", ["http://x", "localhost:6379", "redis://h:notaport", "unix://", 5])
def test_bad_redis_url(write, url):
    path = write(f"redis_url: {url!r}\n" if isinstance(url, str) else f"redis_url: {url}\n")
    message = error_of("-C", path)
    assert "redis_url" in message and "sidekiq.yml" in message


def test_bad_redis_url_in_environment():
    message = error_of(environ={"REDIS_URL": "http://x"})
    assert "REDIS_URL" in message


def test_embedded_redis_relative_to_config_file(write, tmp_path):
    (tmp_path / "etc").mkdir()
    path = write("embedded_redis: data/redis\n", "etc/q.yml")
    assert load("-C", path).embedded_redis == str(tmp_path / "etc" / "data" / "redis")
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


def test_erb_is_rejected(write):
    path = write(':concurrency: 5\n:timeout: <%= ENV["T"] %>\n')
    message = error_of("-C", path)
    assert message.startswith(f"{path}: line 2: ERB") and "plain value" in message


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
    assert ("prefetch", 8, config.SETTINGS["prefetch"].help) in rows


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
