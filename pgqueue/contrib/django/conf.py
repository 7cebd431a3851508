"""Settings: `PGQUEUE = {...}` in settings.py, all keys optional.

APP       "module:attr" of your pgqueue.App (default: pgqueue.contrib.django.conf:default_app,
          which the Django tasks backend uses)
DATABASE  the DATABASES alias pgqueue uses and whose transactions enqueue joins ("default")
DSN       a DSN to use instead of the alias's settings (rarely needed)
NOTIFY    False for poolers in transaction mode (workers then poll)
IMPORTS   modules the worker imports at start, to register tasks defined outside the
          apps' `tasks` modules
"""

from __future__ import annotations

import importlib
import weakref
from functools import cache
from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.backends.base.base import NO_DB_ALIAS
from psycopg.conninfo import make_conninfo

from pgqueue.app import App

default_app = App()
DEFAULT_APP_SPEC = "pgqueue.contrib.django.conf:default_app"


def options() -> dict[str, Any]:
    value = getattr(settings, "PGQUEUE", None) or {}
    if not isinstance(value, dict):
        raise ImproperlyConfigured(
            "settings.PGQUEUE must be a dict, e.g. {'APP': 'proj.tasks:app'}"
        )
    return value


def database_alias() -> str:
    alias: str = options().get("DATABASE", "default")
    return alias


def app_spec() -> str:
    spec: str = options().get("APP") or DEFAULT_APP_SPEC
    return spec


@cache
def load(spec: str) -> App:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ImproperlyConfigured(
            f"PGQUEUE['APP'] must look like 'module:attr' (e.g. 'myproj.tasks:app'), not {spec!r}"
        )
    app = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(app, App):
        raise ImproperlyConfigured(
            f"PGQUEUE['APP'] = {spec!r} is not a pgqueue.App (found {type(app).__name__})"
        )
    return app


def get_app() -> App:
    """The project's pgqueue App (PGQUEUE['APP']), configured by the app's ready()."""
    return load(app_spec())


def database_dsn(alias: str | None = None) -> str:
    """A libpq DSN for a DATABASES alias (PGQUEUE['DATABASE'] by default), as its settings
    are now: the same server, database, user and libpq OPTIONS (sslmode, service...) as
    Django's own connections. PGQUEUE['DSN'], if set, instead."""
    if dsn := options().get("DSN"):
        return str(dsn)
    alias = alias or database_alias()
    connection = connections[alias]
    if connection.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"pgqueue needs PostgreSQL, but DATABASES[{alias!r}] is {connection.vendor}: "
            "set its ENGINE to django.db.backends.postgresql, "
            "or point PGQUEUE['DATABASE'] at a PostgreSQL alias"
        )
    key = (alias, *(repr(connection.settings_dict.get(k)) for k in _CONNECTION_KEYS))
    dsn = _dsns.get(key)
    if dsn is None:
        params = connection.get_connection_params()
        keywords = _libpq_keywords()
        dsn = make_conninfo(**{k: v for k, v in params.items() if k in keywords and v is not None})
        _dsns[key] = dsn
    return dsn


# What Django builds its connection parameters from: a DSN is worked out again only when
# one of these changed (every enqueue outside a transaction asks for it).
_CONNECTION_KEYS = ("NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")
_dsns: dict[tuple[str, ...], str] = {}


@cache
def _libpq_keywords() -> frozenset[str]:
    return frozenset(o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults())


def setup(app: App | None = None) -> App:
    """Configure the App (PGQUEUE['APP'] by default) from settings. Unless the App was
    given a DSN of its own, it follows PGQUEUE['DATABASE'] (or PGQUEUE['DSN']) as they
    are at each use: under Django's test runner (and pytest-django) it uses the test
    database, under override_settings the overridden one. NOTIFY; enqueues join Django's
    transactions on that alias (or wait for their commit, on psycopg2); workers refresh
    Django's connections around each run. Idempotent."""
    from pgqueue.contrib.django import worker
    from pgqueue.contrib.django.transactions import DjangoTransactions

    app = app or get_app()
    if not app.has_own_dsn:
        app.dsn_source = database_dsn
    if "NOTIFY" in options():
        app.configure(notify=bool(options()["NOTIFY"]))
    transactions = DjangoTransactions()
    app.connection_provider = transactions
    app.enqueue_deferrer = transactions.defer
    worker.install(app.sync_wrappers)
    _apps.add(app)
    return app


# The Apps set up here: their pools close when Django opens a connection to no database,
# which it does only to create or drop a database (test databases).
_apps: weakref.WeakSet[App] = weakref.WeakSet()


def close_apps(**kwargs: Any) -> None:
    """A connection_created receiver: when Django connects to no database (to CREATE or
    DROP a test database), close the pools of the Apps set up here, so that a DROP is not
    refused with "database is being accessed by other users". They reopen at next use."""
    connection = kwargs.get("connection")
    if getattr(connection, "alias", None) != NO_DB_ALIAS:
        return
    for app in list(_apps):
        app.close()


def import_task_modules() -> None:
    """What a worker does at start: import each installed app's `tasks` module, then
    PGQUEUE['IMPORTS'], so that every task (and every @task of Django's tasks framework)
    is registered before the first claim."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("tasks")
    for name in options().get("IMPORTS", ()):
        importlib.import_module(name)
