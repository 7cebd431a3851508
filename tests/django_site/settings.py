"""A minimal Django project for tests that need settings of their own
(tests/contrib/django/test_django.py): the database comes from $DATABASE_URL, under three
aliases with different connection lifetimes; DJANGO_DB_DRIVER=psycopg2 puts Django on psycopg2."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import django
from psycopg.conninfo import conninfo_to_dict


def use_psycopg2() -> None:
    """Load Django's postgresql backend on psycopg2, as Django does when psycopg 3 cannot be
    imported (it prefers psycopg 3, which pgqueue needs and installs). psycopg 3 is hidden
    only while that backend is imported: pgqueue goes on using it."""
    hidden = {n: m for n, m in sys.modules.items() if n == "psycopg" or n.startswith("psycopg.")}
    for name in hidden:
        del sys.modules[name]
    sys.modules["psycopg"] = None  # type: ignore[assignment]  # `import psycopg` fails
    try:
        importlib.import_module("django.db.backends.postgresql.base")
    finally:
        del sys.modules["psycopg"]
        sys.modules.update(hidden)


if os.environ.get("DJANGO_DB_DRIVER") == "psycopg2":
    use_psycopg2()


def database(url: str, **options: Any) -> dict[str, Any]:
    params = conninfo_to_dict(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.get("dbname", ""),
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
        **options,
    }


URL = os.environ.get("DATABASE_URL", "postgresql://postgres@localhost/postgres")
DATABASES = {
    # Persistent connections, checked at the start of each run (each "request").
    "default": database(URL, CONN_MAX_AGE=None, CONN_HEALTH_CHECKS=True),
    # Persistent, never checked: closed only once an error showed it broken.
    "unchecked": database(URL, CONN_MAX_AGE=None),
    # Django's default: a connection per run ("request"), closed at its end.
    "per_run": database(URL),
}

INSTALLED_APPS = ["pgqueue.contrib.django"]
if django.VERSION < (6,):
    INSTALLED_APPS.insert(0, "django_tasks")  # the tasks framework's backport

PGQUEUE = {"APP": "tests.django_site.tasks:app"}
TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.PgQueueBackend"}}

# DJANGO_DEBUG=1: Django's own LOGGING prints `django.*` records to the console.
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
SECRET_KEY = "tests-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
