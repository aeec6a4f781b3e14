"""queued.server.cli: loading the job code (``-r``) and the command line's exits, in-process.

Every test writes its own uniquely named modules under tmp_path, and sys.path / sys.modules
are put back afterwards, so nothing leaks into other tests.
"""
from __future__ import annotations

import os
import sys
import textwrap
import uuid

import pytest

from queued import __version__
from queued.server.cli import load_app, main
from queued.errors import EXIT_CONFIG_ERROR, AppLoadError
from queued.job import registry


@pytest.fixture(autouse=True)
def isolated_imports():
    path, modules, jobs = list(sys.path), set(sys.modules), set(registry.names())
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    for name in set(registry.names()) - jobs:
        registry.unregister(name)


def unique(prefix="qapp"):
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


MARK = """\
import os
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "loaded.txt"), "a") as f:
    f.write(__name__ + "\\n")
"""


def loaded(folder) -> list[str]:
    p = os.path.join(folder, "loaded.txt")
    return open(p).read().split() if os.path.exists(p) else []


# --- load_app -----------------------------------------------------------------------------------

def test_a_py_file_relative_to_the_base_dir(tmp_path):
    name = unique()
    write(tmp_path / f"{name}.py", MARK + "VALUE = 42\n")
    load_app([f"{name}.py"], str(tmp_path))
    assert loaded(tmp_path) == [name]
    assert sys.modules[name].VALUE == 42


def test_an_absolute_py_file(tmp_path):
    name = unique()
    path = write(tmp_path / "sub" / f"{name}.py", MARK)
    load_app([str(path)], "/")
    assert loaded(tmp_path / "sub") == [name]


def test_a_file_can_import_its_neighbours(tmp_path):
    helper, main_mod = unique("helper"), unique()
    write(tmp_path / f"{helper}.py", "X = 'from the helper'\n")
    write(tmp_path / f"{main_mod}.py", f"from {helper} import X\n")
    load_app([f"{main_mod}.py"], str(tmp_path))
    assert sys.modules[main_mod].X == "from the helper"


def test_a_dotted_module_under_the_base_dir(tmp_path):
    pkg = unique("pkg")
    write(tmp_path / pkg / "__init__.py", "")
    write(tmp_path / pkg / "jobs.py", MARK)
    load_app([f"{pkg}.jobs"], str(tmp_path))
    assert loaded(tmp_path / pkg) == [f"{pkg}.jobs"]


def test_a_package_directory(tmp_path):
    pkg = unique("pkg")
    write(tmp_path / "apps" / pkg / "__init__.py", MARK + "from . import jobs\n")
    write(tmp_path / "apps" / pkg / "jobs.py", "JOBS = ['a']\n")
    load_app([f"apps/{pkg}"], str(tmp_path))
    assert loaded(tmp_path / "apps" / pkg) == [pkg]
    assert sys.modules[f"{pkg}.jobs"].JOBS == ["a"]


def test_several_targets_load_in_order_once_each(tmp_path):
    a, b = unique("a"), unique("b")
    write(tmp_path / f"{a}.py", MARK)
    write(tmp_path / f"{b}.py", MARK)
    load_app([f"{a}.py", f"{b}.py"], str(tmp_path))
    assert loaded(tmp_path) == [a, b]


def test_a_directory_without_init_is_an_error(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(AppLoadError, match="plain"):
        load_app(["plain"], str(tmp_path))


def test_a_missing_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(AppLoadError) as info:
        load_app(["nope_not_here.py"], str(tmp_path))
    assert "nope_not_here.py" in str(info.value)


def test_a_missing_module_is_an_error_naming_it(tmp_path):
    name = unique("missing")
    with pytest.raises(AppLoadError) as info:
        load_app([name], str(tmp_path))
    assert name in str(info.value) and "ModuleNotFoundError" in str(info.value)


def test_a_module_raising_at_import_gives_one_line_naming_file_and_line(tmp_path):
    # Given job code that raises on line 3
    name = unique()
    path = write(tmp_path / f"{name}.py",
                 "import os\nX = 1\nraise RuntimeError('no database configured')\n")
    # When it is loaded
    with pytest.raises(AppLoadError) as info:
        load_app([f"{name}.py"], str(tmp_path))
    # Then one line says which file, which line, and what went wrong
    message = str(info.value)
    assert "\n" not in message
    assert f"{path}:3" in message
    assert "RuntimeError: no database configured" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_error_raised_in_the_library_names_the_job_code_line(tmp_path):
    # The commonest boot failure: a missing environment variable. KeyError is raised inside
    # the standard library ("<frozen os>"); the line to fix is the job code's.
    name = unique()
    path = write(tmp_path / f"{name}.py",
                 "import os\nURL = os.environ['QUEUED_TEST_SURELY_UNSET']\n")
    with pytest.raises(AppLoadError) as info:
        load_app([f"{name}.py"], str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and "KeyError" in message
    assert f"{path}:2" in message, message


def test_an_error_deep_in_the_job_code_names_the_deepest_job_line(tmp_path):
    inner, outer = unique("inner"), unique("outer")
    inner_path = write(tmp_path / f"{inner}.py", "\n\nimport json\nCONFIG = json.loads('{')\n")
    write(tmp_path / f"{outer}.py", f"import {inner}\n")
    with pytest.raises(AppLoadError) as info:
        load_app([f"{outer}.py"], str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and "JSONDecodeError" in message
    assert f"{inner_path}:4" in message, message


def test_a_syntax_error_names_file_and_line(tmp_path):
    name = unique()
    write(tmp_path / f"{name}.py", "x = 1\ndef broken(:\n")
    with pytest.raises(AppLoadError) as info:
        load_app([f"{name}.py"], str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and "SyntaxError" in message
    assert f"{name}.py" in message and "line 2" in message


def test_a_multi_line_error_message_still_gives_one_line(tmp_path):
    # Job code may raise with a multi-line message (validation libraries do)
    name = unique()
    write(tmp_path / f"{name}.py",
          "raise ValueError('settings invalid:\\n  DB_URL missing\\n  KEY missing')\n")
    with pytest.raises(AppLoadError) as info:
        load_app([f"{name}.py"], str(tmp_path))
    message = str(info.value)
    assert "\n" not in message, repr(message)
    assert "DB_URL missing" in message


def test_two_classes_under_one_job_name_are_a_load_error_naming_both(tmp_path):
    # Which class ran a "Dup" job depended on the import order; a UserWarning scrolled past
    first, second, name = unique("first"), unique("second"), unique("Dup")
    for module in (first, second):
        write(tmp_path / f"{module}.py", f"""\
            import queued


            class {module.title()}(queued.Job):
                queued_options = {{"name": "{name}"}}
            """)
    with pytest.raises(AppLoadError) as info:
        load_app([f"{first}.py", f"{second}.py"], str(tmp_path))
    message = str(info.value)
    assert "\n" not in message
    assert message == (f"cannot load job code '{second}.py': JobNameClash: job name '{name}' is "
                       f"taken by two classes: {first}.{first.title()} and "
                       f"{second}.{second.title()} (the second replaces the first) "
                       f"({tmp_path}/{second}.py:4)")


def test_system_exit_at_import_is_a_load_error(tmp_path):
    name = unique()
    write(tmp_path / f"{name}.py", "import sys\nsys.exit(3)\n")
    with pytest.raises(AppLoadError, match="SystemExit"):
        load_app([f"{name}.py"], str(tmp_path))


def test_keyboard_interrupt_at_import_is_not_swallowed(tmp_path):
    name = unique()
    write(tmp_path / f"{name}.py", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_app([f"{name}.py"], str(tmp_path))


# --- main -------------------------------------------------------------------------------------

def test_main_dash_v_prints_the_version(capsys):
    assert main(["-V"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"queued {__version__}"


@pytest.mark.parametrize("content,words", [
    (":concurrency: 2\n:bogus_key: 1\n", ["bogus_key"]),
    (":concurrency: [unclosed\n", ["YAML"]),
    (":concurrency: many\n", ["concurrency"]),
    (None, ["cannot read"]),
])
def test_main_with_a_bad_config_exits_2_with_one_line(tmp_path, capsys, content, words):
    path = tmp_path / "sidekiq.yml"
    if content is not None:
        path.write_text(content)
    assert main(["-C", str(path)]) == EXIT_CONFIG_ERROR == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.endswith("\n") and err.count("\n") == 1, repr(err)
    assert err.startswith("queued: ")
    assert str(path) in err
    for w in words:
        assert w in err
    assert captured.out == ""
