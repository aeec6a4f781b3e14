"""queued.server.appcode: the job code loaded again in place (a HUP), and put back exactly as
it was when the new code does not load."""
from __future__ import annotations

import sys

import pytest

from queued import events
from queued.periodic import declared
from queued.errors import AppLoadError, ConfigError
from queued.job import registry
from queued.middleware import server_middleware
from queued.server.appcode import AppCode, _Registries

APP = '''
import queued
import {helper} as helper

VERSION = helper.VERSION


class {cls}(queued.Job):
    def perform(self):
        return VERSION


class Mw:
    def __call__(self, job, msg, queue, call_next):
        return call_next()


queued.server_middleware.add(Mw)


@queued.on("heartbeat")
def beat():
    pass
'''


@pytest.fixture
def app(tmp_path, monkeypatch):
    """A job module and a helper it imports, written per test under unique names; queued's
    registries and sys.modules are put back afterwards."""
    saved = _Registries.capture()
    registry.restore({})  # as in a daemon before its job code (other tests registered theirs)
    modules = set(sys.modules)
    path = list(sys.path)
    monkeypatch.chdir(tmp_path)
    stem = f"hupapp_{tmp_path.name.replace('-', '_')}"
    helper = stem + "_helper"

    def write(version: str, cls: str = "Deployed", tail: str = "") -> None:
        (tmp_path / f"{helper}.py").write_text(f"VERSION = {version!r}\n")
        (tmp_path / f"{stem}.py").write_text(APP.format(helper=helper, cls=cls + stem) + tail)

    yield write, f"{stem}.py", stem, helper
    saved.restore()
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


def job_class(stem, cls="Deployed"):
    return registry.lookup(cls + stem)


def test_reload_runs_the_new_files_and_replaces_what_the_old_code_registered(app, tmp_path):
    write, target, stem, helper = app
    write("v1")
    code = AppCode(str(tmp_path))
    middleware_before = len(server_middleware)
    handlers_before = len(events.snapshot()[0]["heartbeat"])
    code.load([target])
    old_module, old_class = sys.modules[stem], job_class(stem)
    assert old_class().perform() == "v1" and {stem, helper} <= code.modules
    # When the helper changes on disk (and the job class is renamed) and the code is reloaded
    write("v2-new", cls="Renamed")
    code.reload([target])
    # Then the new files ran: the module, and the helper it imports, are new objects
    assert sys.modules[stem] is not old_module and job_class(stem, "Renamed")().perform() == \
        "v2-new"
    # And what the old code registered is gone, not doubled: the old class name, its
    # middleware and its event handler
    assert job_class(stem) is None
    assert len(server_middleware) == middleware_before + 1
    assert len(events.snapshot()[0]["heartbeat"]) == handlers_before + 1


def test_a_reload_that_fails_changes_nothing(app, tmp_path):
    write, target, stem, helper = app
    write("v1")
    code = AppCode(str(tmp_path))
    code.load([target])
    before = (sys.modules[stem], sys.modules[helper], job_class(stem),
              server_middleware.snapshot(), events.snapshot(), list(sys.path))
    # When the new code registers things and then fails halfway through its import
    write("v2", cls="Half", tail="\nraise RuntimeError('broken deploy')\n")
    with pytest.raises(AppLoadError, match=r"cannot load job code .*RuntimeError: broken "
                                           r"deploy \(.*\.py:\d+\)"):
        code.reload([target])
    # Then every module, class, middleware and handler is the old one, as before
    assert (sys.modules[stem], sys.modules[helper], job_class(stem),
            server_middleware.snapshot(), events.snapshot(), list(sys.path)) == before
    assert job_class(stem, "Half") is None
    # And a later good reload works
    write("v3")
    code.reload([target])
    assert job_class(stem)().perform() == "v3"


PERIODIC = """
@queued.periodic("*/5 * * * *", name="{name}")
class Ticked(queued.Job):
    def perform(self):
        pass
"""


def test_periodic_declarations_follow_the_code_and_a_failed_check_puts_them_back(app, tmp_path):
    write, target, stem, helper = app
    write("v1", tail=PERIODIC.format(name="every5-" + stem))
    code = AppCode(str(tmp_path))
    code.load([target])
    assert "every5-" + stem in declared
    # When the new code renames its schedule, the old declaration is gone, not kept beside it
    write("v2", tail=PERIODIC.format(name="renamed-" + stem))
    code.reload([target])
    assert "renamed-" + stem in declared and "every5-" + stem not in declared
    # When the check after the import fails (a schedule naming no job class), everything is
    # put back, the schedules included, and the check's error goes to the caller
    write("v3", tail=PERIODIC.format(name="v3-" + stem))

    def refuse():
        raise ConfigError("schedule v3: 'Nope' is not a job class of this process")
    with pytest.raises(ConfigError, match="Nope"):
        code.reload([target], check=refuse)
    assert "renamed-" + stem in declared and "v3-" + stem not in declared
    assert job_class(stem)().perform() == "v2"


def test_code_that_registers_no_job_is_a_failed_reload(app, tmp_path):
    write, target, stem, helper = app
    write("v1")
    code = AppCode(str(tmp_path))
    code.load([target])
    (tmp_path / target).write_text("x = 1\n")
    with pytest.raises(AppLoadError, match="no job classes"):
        code.reload([target])
    assert job_class(stem)().perform() == "v1"


def test_libraries_the_job_code_brought_in_are_not_loaded_again(app, tmp_path, monkeypatch):
    # Given job code that imports a standard library module and an installed library (in a
    # site-packages folder), neither loaded before it
    site = tmp_path / "venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    lib = f"somelib_{tmp_path.name.replace('-', '_')}"
    (site / f"{lib}.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(site))
    sys.modules.pop("tabnanny", None)  # (harmless to import afresh)
    write, target, stem, helper = app
    write("v1", tail=f"\nimport tabnanny\nimport {lib}\n")
    code = AppCode(str(tmp_path))
    code.load([target])
    libraries = sys.modules["tabnanny"], sys.modules[lib]
    # When it is reloaded
    code.reload([target])
    # Then they are the same module objects (a new library version needs a restart); only the
    # application's own modules ran again
    assert (sys.modules["tabnanny"], sys.modules[lib]) == libraries
    assert code.modules == {stem, helper}
