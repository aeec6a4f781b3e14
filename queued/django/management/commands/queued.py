"""``python manage.py queued [queued's flags]``: the daemon, with this project's settings.

Every flag after ``queued`` is queued's own (``-c 4 -q critical,2 -t 30 -v``): Django's option
parser is not used (its ``-v`` means verbosity). manage.py's ``--settings`` and
``--pythonpath``, which it applies itself before loading a command, are taken out.
"""
from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

_DJANGO_OPTIONS = ("--settings", "--pythonpath")


class Command(BaseCommand):
    help = "Run the queued daemon with this project's settings (takes queued's own flags)."

    def run_from_argv(self, argv: list[str]) -> None:
        from queued.server.cli import main
        sys.exit(main(_without_django_options(argv[2:])))

    def print_help(self, prog_name: str, subcommand: str) -> None:
        from queued.config import build_parser
        parser = build_parser()
        parser.prog = f"{prog_name} {subcommand}"
        parser.print_help()

    def handle(self, *args, **options):
        raise CommandError("run the daemon as `python manage.py queued [flags]`, not through "
                           "call_command()")


def _without_django_options(args: list[str]) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in _DJANGO_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in _DJANGO_OPTIONS)):
            out.append(arg)
    return out
