"""The test project with an app whose jobs module fails to import."""
from djsite import settings as _base

globals().update({k: v for k, v in vars(_base).items() if k.isupper()})
INSTALLED_APPS = [*_base.INSTALLED_APPS, "brokenapp"]
