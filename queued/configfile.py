"""The config file in Sidekiq's sidekiq.yml dialect: keys with or without the leading colon,
environment sections, and nothing dropped without a word: a key is a setting, the selected
environment section or another valid one, or an error naming it and the file.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import yaml

from . import erb
from .errors import ConfigError
from .settings import ALIASES, DEFAULT_SECTION, SETTINGS, parse
from .values import error, show


def read_yaml(path: str, environ: Mapping[str, str]) -> Any:
    """The file's YAML, after its ERB tags (the forms erb.py evaluates, as Sidekiq runs the
    file through ERB first)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read config file: "
                    f"{getattr(exc, 'strerror', None) or exc}") from None
    if "<%" in text:
        try:
            text = erb.render(text, environ)
        except erb.ErbError as exc:
            raise error(f"{path}: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or exc
        raise error(f"{path}: {where}invalid YAML: {problem}") from None


def _key(key: Any, source: str, where: str) -> str:
    # Sidekiq files write `:concurrency:`, which YAML reads as the string ":concurrency".
    if not isinstance(key, str):
        raise error(f"{source}: unknown key {where}{show(key)}")
    return key[1:] if key.startswith(":") else key


def _file_names() -> list[str]:
    return [name for name, s in SETTINGS.items() if not s.not_in_file] + list(ALIASES)


def _unknown(source: str, where: str, key: str) -> ConfigError:
    close = difflib.get_close_matches(key, _file_names(), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return error(f"{source}: unknown key '{where}{key}'{hint}")


def _normalized(mapping: Mapping, source: str, where: str) -> dict[str, tuple[str, Any]]:
    """{setting or section name: (key as written, value)}, refusing a key given twice."""
    out: dict[str, tuple[str, Any]] = {}
    written: dict[str, str] = {}
    for raw_key, value in mapping.items():
        key = _key(raw_key, source, where)
        name = ALIASES.get(key, key)
        if name in out:
            raise error(f"{source}: {where}{key}: given twice "
                        f"(as '{written[name]}' and '{raw_key}')")
        out[name], written[name] = (key, value), raw_key
    return out


def _file_level(mapping: Mapping, source: str, where: str = "",
                sections: dict[str, Mapping] | None = None) -> dict[str, Any]:
    """Parse one mapping of the file. Mapping-valued keys that are no setting go to
    ``sections`` if given (the top level), to be checked as environment sections."""
    values: dict[str, Any] = {}
    for name, (key, value) in _normalized(mapping, source, where).items():
        setting = SETTINGS.get(name)
        if setting is None and sections is not None and isinstance(value, Mapping):
            sections[name] = value
        elif setting is None:
            raise _unknown(source, where, key)
        elif setting.not_in_file:
            raise error(f"{source}: {where}{key}: not a config file setting "
                        f"({setting.not_in_file})")
        else:
            values[name] = parse(setting, value, source, where + key)
    return values


def _names_a_setting(key: Any) -> bool:
    """Whether a key is a setting, or looks like a misspelt one."""
    if not isinstance(key, str):
        return False
    name = key[1:] if key.startswith(":") else key
    return (ALIASES.get(name, name) in SETTINGS
            or bool(difflib.get_close_matches(name, _file_names(), n=1)))


#: Names that are environment sections whatever they hold (for the error about a key in them).
USUAL_ENVIRONMENTS = ("development", "test", "staging", "production")


def _sections(found: dict[str, Mapping], source: str,
              environment: str | None) -> dict[str, dict[str, Any]]:
    """Every top-level mapping that is not a setting, parsed as an environment section. Each
    must be one, selected or not: a mapping none of whose keys is (nearly) a setting, under a
    name that is no environment's, is someone's block (``:redis:`` misspelt, another gem's)
    that queued would otherwise drop without a word; and a typo inside any section is a typo."""
    parsed = {}
    for name, mapping in found.items():
        if (mapping and name != environment and name not in USUAL_ENVIRONMENTS
                and not any(map(_names_a_setting, mapping))):
            # The only keys whose value is a mapping: a near miss of one is a typo.
            close = difflib.get_close_matches(name, ["redis", "scheduler", "schedule"], n=1)
            why = (f"did you mean '{close[0]}'?" if close else "a mapping, but not an environment "
                   f"section: '{_key(next(iter(mapping)), source, '')}' is not a setting")
            raise error(f"{source}: unknown key '{name}' ({why})")
        parsed[name] = _file_level(mapping, source, where=f"{name}.")
    return parsed


def _select(sections: Mapping[str, Any], source: str, environment: str | None,
            origin: str | None) -> str | None:
    """The section in effect: the environment's (Sidekiq's ``opts.merge(opts.delete(env))``).
    An environment named explicitly whose section is missing while one is spelt nearly like it
    is a typo on one side or the other, not a reason to run on the top level alone."""
    env = environment or DEFAULT_SECTION
    if env in sections:
        return env
    close = difflib.get_close_matches(env, list(sections), n=1) if environment else []
    if close:
        raise error(f"{source}: no section for environment '{env}' (from {origin}); did you "
                    f"mean the section '{close[0]}'?")
    if origin == "-e" and sections:
        # Named on the command line for a file that has sections: a typo or the wrong file,
        # not a reason to start on the top level alone. (From RAILS_ENV and the like, Sidekiq's
        # top-level fallback stays: one variable serves the whole app, not only this file.)
        raise error(f"{source}: no section for environment '{env}' (from -e); the file's "
                    f"sections are {', '.join(repr(s) for s in sections)}")
    return None


def file_values(data: Any, source: str, environment: str | None,
                origin: str | None) -> tuple[dict[str, Any], str | None]:
    """The top level with the chosen environment section merged over it; and that section."""
    if data is None:
        return {}, None
    if not isinstance(data, Mapping):
        raise error(f"{source}: expected a mapping of settings at the top level, "
                    f"got {type(data).__name__}")
    found: dict[str, Mapping] = {}
    values = _file_level(data, source, sections=found)
    sections = _sections(found, source, environment)
    section = _select(sections, source, environment, origin)
    if section is not None:
        values.update(sections[section])
    return values, section
