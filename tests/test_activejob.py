"""queued.server.activejob: Rails' ActiveJob payloads (Sidekiq adapter) unwrapped for a Python job.
(The real Rails side is in tests/interop/test_activejob.py.)"""
from queued import activejob


def aj(*arguments):
    return {"class": activejob.WRAPPER, "wrapped": "HardJob",
            "args": [{"job_class": "HardJob", "arguments": list(arguments)}]}


def test_ruby_keyword_arguments_become_python_keyword_arguments():
    # Rails 6.1 serialises perform_later(1, mode: :fast, n: {a: 1}) like this
    msg = aj(1, {"mode": {"_aj_serialized": "ActiveJob::Serializers::SymbolSerializer",
                          "value": "fast"},
                 "n": {"a": 1, "_aj_symbol_keys": ["a"]},
                 "_aj_ruby2_keywords": ["mode", "n"]})
    assert activejob.arguments(msg) == ([1], {"mode": "fast", "n": {"a": 1}})


def test_a_plain_hash_argument_stays_positional():
    msg = aj({"a": 1, "_aj_symbol_keys": ["a"]}, {"b": 2})
    assert activejob.arguments(msg) == ([{"a": 1}, {"b": 2}], {})


def test_keywords_that_python_cannot_take_stay_a_positional_hash():
    msg = aj({"not a name": 1, "_aj_ruby2_keywords": ["not a name"]})
    assert activejob.arguments(msg) == ([{"not a name": 1}], {})
