"""The test project with a second database alias on the same PostgreSQL server (the same
database, a connection of its own): the boot check must judge the server once, for both."""
from djsite import settings as _base

globals().update({k: v for k, v in vars(_base).items() if k.isupper()})
DATABASES = {**_base.DATABASES, "other": dict(_base.DATABASES["default"])}
