"""A bad config stops queued at once: exit status 2 and one line naming the problem (the
key, the file), never a traceback. (Bad job code, exit 4, is tests/integration/test_boot.py.)"""
import os
import subprocess
import sys
import time

import pytest
import yaml
from faults.common import report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# kind -> [(config file content or a path to pass to -C, extra argv, env, what the line says)]
CASES = {
    "unknown key": [
        ({"bogus_key": 1}, (), {}, "unknown key 'bogus_key'"),
        (":concurency: 3\n", (), {}, "unknown key 'concurency' (did you mean 'concurrency'?)"),
        ({"production": {"bogus": 1}}, ("-e", "production"), {}, "unknown key 'production.bogus'"),
    ],
    "wrong type": [
        ({"concurrency": "many"}, (), {}, "concurrency: expected a positive integer, got 'many'"),
        ({"heartbeat_interval": [1]}, (), {},
         "heartbeat_interval: expected a positive number of seconds, got [1]"),
        ({"verbose": "yes"}, (), {}, "verbose: expected true or false, got 'yes'"),
        ({"queues": "default"}, (), {}, "queues: expected a list of queues, got 'default'"),
        ("concurrency: [1\n", (), {}, "invalid YAML"),
    ],
    "bad queue weight": [
        ({"queues": [["critical", -1]]}, (), {},
         "queues: queue 'critical': weight: expected an integer >= 0, got -1"),
        ({"queues": [["critical", "x"]]}, (), {},
         "queues: queue 'critical': weight: expected an integer >= 0, got 'x'"),
        ({"queues": ["critical,abc"]}, (), {},
         "queues: queue 'critical': weight: expected an integer >= 0, got 'abc'"),
        ({"queues": [["a", 1, 2]]}, (), {},
         "queues: expected a queue name, [name, weight] or 'name,weight', got ['a', 1, 2]"),
        (None, ("-q", "critical,1.5"), {}, "command line: -q/--queue: queue 'critical': weight: "
                                           "expected an integer >= 0, got '1.5'"),
    ],
    "unreadable file": [
        ("/nonexistent/sidekiq.yml", (), {}, "/nonexistent/sidekiq.yml: cannot read config "
                                             "file: No such file or directory"),
        ("{tmp}", (), {}, "{tmp}: cannot read config file: Is a directory"),
        (b"concurrency: \xff\xfe\n", (), {}, "cannot read config file"),
    ],
    "bad Redis URL": [
        ({"redis_url": "http://localhost:6379"}, (), {},
         "redis_url: expected a redis://, rediss:// or unix:// URL, got 'http://localhost:6379'"),
        ({"redis_url": "redis://127.0.0.1:abc/0"}, (), {}, "redis_url: expected a redis://"),
        ({"redis_url": 6379}, (), {}, "redis_url: expected a redis://"),
        (None, (), {"REDIS_URL": "localhost:6379"},
         "environment: REDIS_URL: expected a redis://, rediss:// or unix:// URL, got "
         "'localhost:6379'"),
    ],
    # Things queued used to take without a word: an environment section spelt otherwise, a
    # mapping that is no section, Sidekiq's :redis: with a typo, a bad
    # sidekiq-scheduler schedule (the whole block was refused before periodic jobs came).
    "silent config": [
        ({"prodution": {"concurrency": 9}}, ("-e", "production"), {},
         "no section for environment 'production' (from -e); did you mean the section "
         "'prodution'?"),
        ({"prodution": {"concurrency": 9}}, (), {"RAILS_ENV": "production"},
         "(from RAILS_ENV); did you mean the section 'prodution'?"),
        ({"sidekiq_cron": {"nightly": {"cron": "0 3 * * *"}}}, (), {},
         "unknown key 'sidekiq_cron' (a mapping, but not an environment section"),
        ({":redis": {":urll": "redis://127.0.0.1:6379/0"}}, (), {},
         "unknown key 'redis.urll' (did you mean 'redis.url'?)"),
        ({":redis": {"url": "redis://h/0"}, "redis_url": "redis://h/0"}, (), {},
         "redis: cannot be set together with redis_url"),
        ({":schedule": {"nightly": {"cron": "0 3 * * * Europe/Berln", "class": "Nightly"}}}, (),
         {}, "schedule.nightly.cron: unknown time zone 'Europe/Berln'"),
    ],
}


def run_queued(config, argv, env, tmp_path):
    """Run ``queued`` with this config; (exit status, output, config path, seconds)."""
    path = None
    if isinstance(config, dict):
        path = os.path.join(tmp_path, f"bad-{time.time_ns()}.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
    elif isinstance(config, bytes) or (isinstance(config, str) and "\n" in config):
        path = os.path.join(tmp_path, f"bad-{time.time_ns()}.yml")
        with open(path, "wb") as f:
            f.write(config if isinstance(config, bytes) else config.encode())
    elif isinstance(config, str):
        path = config.format(tmp=tmp_path)
    args = [sys.executable, "-m", "queued", *(("-C", path) if path else ()), *argv]
    full_env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    full_env.update(PYTHONPATH=ROOT, **env)
    t0 = time.monotonic()
    proc = subprocess.run(args, capture_output=True, timeout=30, env=full_env, cwd=tmp_path)
    return (proc.returncode, (proc.stdout + proc.stderr).decode("utf-8", "replace"), path,
            time.monotonic() - t0)


@pytest.mark.parametrize("kind", list(CASES))
def test_a_bad_config_exits_2_with_one_line_naming_the_problem(tmp_path, kind):
    slowest = 0.0
    for config, argv, env, says in CASES[kind]:
        code, out, path, took = run_queued(config, argv, env, str(tmp_path))
        slowest = max(slowest, took)
        lines = out.strip().splitlines()
        assert code == 2, (config, out)
        assert len(lines) == 1, (config, out)
        assert lines[0].startswith("queued: "), out
        assert says.format(tmp=tmp_path) in lines[0], (says, out)
        if path and not path.startswith("/nonexistent") and os.path.isfile(path):
            assert lines[0].startswith(f"queued: {path}: "), out  # names the file
        assert "Traceback" not in out
    report(f"bad config: {kind} ({len(CASES[kind])} variants)", "-", "-", "-", "-",
           f"exit 2 with one line naming it, in {slowest:.1f} s at most; no traceback")
