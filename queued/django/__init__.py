"""queued inside a Django project (issue 19; docs/django.md).

Put ``"queued.django"`` in ``INSTALLED_APPS``: pushes made inside ``transaction.atomic()`` then
wait for the commit (commit.py), and ``python manage.py queued [queued's flags]`` runs the
daemon. The daemon itself (``queued`` with ``DJANGO_SETTINGS_MODULE`` set, or ``-r`` naming the
project's folder) sets Django up before the job code, imports every installed app's ``jobs``
module, may take its settings from ``settings.QUEUED``, closes the master's database
connections before each fork and closes old connections around every job (daemon.py).

Nothing here is imported unless Django is in use: importing ``queued`` never imports Django,
and this package's ``__init__`` imports nothing.
"""
