"""The test Django project (tests/djangoproj) on the session's PostgreSQL, set up once in the
test process (conftest.py's ``django_site``): its database made and its tables created. The
settings module goes into the environment only while Django reads it, so the daemons other
tests start never see DJANGO_SETTINGS_MODULE; daemons of the Django tests get ``env()``."""
from __future__ import annotations

import logging
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.join(HERE, "djangoproj")
DATABASE = "queued_test"


class DjangoSite:
    def __init__(self, postgres, redis_url: str):
        self.postgres = postgres
        self.redis_url = redis_url

    def env(self, settings: str = "djsite.settings", **extra: str) -> dict[str, str]:
        """What a daemon or manage.py of this project needs in its environment."""
        return {"QUEUED_TEST_PG_PORT": str(self.postgres.port), "QUEUED_TEST_PG_DB": DATABASE,
                "QUEUED_TEST_REDIS": self.redis_url, "DJANGO_SETTINGS_MODULE": settings,
                "PYTHONPATH": os.pathsep.join((os.path.dirname(HERE), PROJECT)), **extra}

    def setup(self) -> None:
        self.postgres.create_database(DATABASE)
        if PROJECT not in sys.path:
            sys.path.insert(0, PROJECT)
        saved = {k: os.environ.get(k) for k in self.env()}
        os.environ.update({k: v for k, v in self.env().items() if k != "PYTHONPATH"})
        # (the project's LOGGING disables every logger that exists, as dictConfig does by
        # default: the loggers of this process are put back as they were, for the tests
        # that read them with caplog)
        loggers = {name: logger.disabled for name, logger in
                   logging.root.manager.loggerDict.items() if isinstance(logger, logging.Logger)}
        try:
            import django
            from django.core.management import call_command
            django.setup()
            call_command("migrate", run_syncdb=True, verbosity=0)
        finally:
            for name, disabled in loggers.items():
                logging.getLogger(name).disabled = disabled
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        # queued.django's ready() made every push in this process wait for commits; the
        # tests that want it turn it on for themselves (conftest.py's after_commit).
        from queued.django import commit
        commit.uninstall()

    def clean(self) -> None:
        """Empty the tables and close this thread's connections."""
        from django.db import connection, connections
        with connection.cursor() as cur:
            cur.execute("TRUNCATE ledger_item, ledger_order RESTART IDENTITY")
        connections.close_all()
