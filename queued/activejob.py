"""Rails ActiveJob jobs enqueued through Sidekiq's adapter.

Rails pushes ``{"class": "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper", "wrapped":
"HardJob", "args": [{"job_class": "HardJob", "arguments": [...], ...}]}``. When a job class is
registered under the wrapped name, queued runs it with ActiveJob's ``arguments``, unwrapped:
the ``_aj_*`` bookkeeping keys that ActiveJob's serializer adds to hashes are removed, and
serialized symbols become strings. Other serialized objects (GlobalID records, times) are
passed as the dicts they are on the wire, for the job to interpret.

Keyword arguments (``perform_later(1, mode: "fast")``) arrive as Python keyword arguments:
Rails writes them as a last hash marked ``_aj_ruby2_keywords`` (the list of its keys), so
``def perform(self, n, mode=None)`` gets ``mode="fast"``, as Ruby's ``perform(n, mode:)`` does.
"""
from __future__ import annotations

from typing import Any

WRAPPER = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper"
#: Newer Rails (7.2+) names its wrapper this way.
WRAPPERS = (WRAPPER, "Sidekiq::ActiveJob::Wrapper")
_MARKERS = ("_aj_symbol_keys", "_aj_ruby2_keywords", "_aj_hash_with_indifferent_access")
_SYMBOL = "ActiveJob::Serializers::SymbolSerializer"


def is_wrapped(msg: dict) -> bool:
    return msg.get("class") in WRAPPERS and bool(msg.get("args")) and isinstance(
        msg["args"][0], dict)


def job_name(msg: dict) -> str:
    """The class to run: ``wrapped``, else the ActiveJob payload's ``job_class``."""
    return str(msg.get("wrapped") or msg["args"][0].get("job_class") or msg["class"])


_KEYWORDS = "_aj_ruby2_keywords"


def arguments(msg: dict) -> tuple[list, dict]:
    """The job's (positional, keyword) arguments, unwrapped."""
    args = msg["args"][0].get("arguments", [])
    if not isinstance(args, list):
        return [], {}
    kwargs: dict = {}
    last = args[-1] if args else None
    if isinstance(last, dict) and isinstance(last.get(_KEYWORDS), list) and all(
            isinstance(k, str) and k.isidentifier() for k in last[_KEYWORDS]):
        kwargs = {k: _plain(v) for k, v in last.items() if k not in _MARKERS}
        args = args[:-1]
    return [_plain(a) for a in args], kwargs


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        if value.get("_aj_serialized") == _SYMBOL:
            return value.get("value")
        return {k: _plain(v) for k, v in value.items() if k not in _MARKERS}
    return value
