"""The files a daemon writes at boot (``pidfile:``, ``logfile:``) in a folder that does not
exist or cannot be written: one line naming the setting and the path, and exit status 2, so
the shipped unit's ``RestartPreventExitStatus=2`` stops systemd restarting it every second
(issue 16.2). It was a Python traceback and status 1."""
import os

import pytest

from queued.errors import EXIT_CONFIG_ERROR


@pytest.mark.parametrize("setting", ["pidfile", "logfile"])
@pytest.mark.parametrize("problem", ["missing folder", "a file for a folder"])
def test_a_file_in_a_folder_that_is_not_there_is_one_line_and_exit_2(daemon, tmp_path,
                                                                      setting, problem):
    # Given a path whose folder is missing, or is a plain file
    if problem == "missing folder":
        path = str(tmp_path / "no" / "such" / "folder" / "queued.out")
    else:
        (tmp_path / "plain").write_text("not a folder\n")
        path = str(tmp_path / "plain" / "queued.out")
    # When the daemon boots with it
    d = daemon(wait=False, **{setting: path})
    # Then it exits 2 with one line naming the config file, the setting and the path
    assert d.wait(30) == EXIT_CONFIG_ERROR == 2
    out = d.output()
    assert out.count("\n") == 1 and out.startswith("queued: "), out
    assert f"{d.config}: {setting}: cannot write {path}" in out
    assert "Traceback" not in out
    assert not os.path.exists(path)
