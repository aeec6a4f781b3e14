"""``queued.api``: the operator's Python API, by the name the contract gives it. The code is in
queued/admin/api.py; the daemon never imports either."""
from .admin.api import *  # noqa: F401,F403
from .admin.api import __all__  # noqa: F401
