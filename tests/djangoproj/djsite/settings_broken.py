"""The test project with an app whose jobs module fails to import."""
from djsite.settings import *  # noqa: F401,F403
from djsite.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "brokenapp"]
