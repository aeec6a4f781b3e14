"""The Django app: ``INSTALLED_APPS = [..., "queued.django"]``."""
from __future__ import annotations

from django.apps import AppConfig


class QueuedConfig(AppConfig):
    name = "queued.django"
    label = "queued"
    verbose_name = "queued"

    def ready(self) -> None:
        from . import commit
        commit.install()
