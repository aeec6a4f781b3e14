"""The test project with queued's settings in Django's (settings.QUEUED)."""
import os

from djsite import settings as _base

globals().update({k: v for k, v in vars(_base).items() if k.isupper()})
QUEUED = {
    "redis_url": os.environ.get("QUEUED_TEST_REDIS", "redis://127.0.0.1:6379/0"),
    "concurrency": 1,
    "heartbeat_interval": 0.5,
    "queues": ["django_only"],
    "tag": "from-settings",
}
