"""The test project's settings: PostgreSQL from tests/pgserver.py (its port and database in
the environment the tests set), persistent connections (CONN_MAX_AGE), and queued.django."""
import os

SECRET_KEY = "queued-tests-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["queued.django", "ledger"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": "127.0.0.1",
        "PORT": os.environ.get("QUEUED_TEST_PG_PORT", "5432"),
        "USER": "queued",
        "NAME": os.environ.get("QUEUED_TEST_PG_DB", "queued_test"),
        # Kept across jobs, as production sites do: a connection a worker inherited from its
        # master would be used, not closed by the first close_old_connections().
        "CONN_MAX_AGE": 600,
        "TEST": {"NAME": os.environ.get("QUEUED_TEST_PG_DB", "queued_test") + "_django"},
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
# As many projects write it: dictConfig's default disables the loggers that exist already.
LOGGING = {"version": 1, "handlers": {}, "loggers": {}}
