"""The dashboard (``queuedctl web``): a Starlette app over ``queued.api``, served by uvicorn,
mountable in another site as ASGI (``create_app``) or WSGI (``create_wsgi_app``). Needs the
``web`` extra: ``pip install 'queued-jobs[web]'``. See docs/dashboard.md."""
from .app import create_app, create_wsgi_app

__all__ = ["create_app", "create_wsgi_app"]
