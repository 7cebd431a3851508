"""`manage.py pgqueue ...`: the pgqueue command line with this project's settings.

`manage.py pgqueue migrate`, `manage.py pgqueue worker --queues emails --concurrency 20`,
`manage.py pgqueue runs list`... take the same options as `pgqueue`, with the DSN of
PGQUEUE['DATABASE'] and the App of PGQUEUE['APP'] as defaults."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import click
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandParser
from django.utils.connection import ConnectionDoesNotExist

from pgqueue.contrib import _cli
from pgqueue.contrib.django import conf

DJANGO_OPTIONS = ("--settings", "--pythonpath")


class Command(BaseCommand):
    help = "pgqueue's command line (migrate, worker, runs, queues...) with Django's settings."
    # The schema check would warn before `pgqueue migrate` had a chance to fix it.
    requires_system_checks: list[str] = []  # type: ignore[assignment]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, help="pgqueue command and options")

    def run_from_argv(self, argv: list[str]) -> None:
        # Bypass Django's option parsing: click parses (and documents) pgqueue's options.
        prog = f"{os.path.basename(argv[0])} {argv[1]}"
        self.run_pgqueue(_without_django_options(argv[2:]), prog)

    def handle(self, *args: str, **options: Any) -> None:
        self.run_pgqueue(list(args), "manage.py pgqueue")

    def run_pgqueue(self, argv: list[str], prog: str) -> None:
        try:
            conf.import_task_modules()
            app = conf.setup()
            dsn = app.dsn
        except (ImproperlyConfigured, ConnectionDoesNotExist) as exc:
            # settings pgqueue cannot use (PGQUEUE['APP'], a DATABASES alias that is not
            # PostgreSQL...): one line and exit 2, as the pgqueue command says user errors
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        _cli.run(argv or ["--help"], app=app, dsn=dsn, prog_name=prog)


def _without_django_options(argv: list[str]) -> list[str]:
    """Drop --settings/--pythonpath (manage.py already applied them)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in DJANGO_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in DJANGO_OPTIONS)):
            out.append(arg)
    return out
