"""pytest fixtures for queued.testing. Turn them on in a ``conftest.py``::

    pytest_plugins = ["queued.testing.pytest_plugin"]

(an installed queued also registers this module with pytest through its ``pytest11`` entry
point, under the module's own name, so the line above does no harm there). ``queued_fake`` and ``queued_inline`` put the test in that mode, with nothing left in
memory from another test, and put the previous mode back afterwards; each gives the
``queued.testing`` module (``queued_fake.drain_all()``). pytest is not a dependency of queued:
this module is imported by pytest only.
"""
from __future__ import annotations

import pytest

import queued.testing as _testing


def _in(switch):
    _testing.clear_all()
    with switch:
        yield _testing
    _testing.clear_all()


@pytest.fixture
def queued_fake():
    """Fake mode: pushes land in ``HardWorker.jobs``; ``drain()`` runs them."""
    yield from _in(_testing.fake())


@pytest.fixture
def queued_inline():
    """Inline mode: every push runs its job at once, in the test's thread."""
    yield from _in(_testing.inline())
