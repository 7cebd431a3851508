"""System checks: the configuration (always) and the pgqueue schema (with the database
checks, i.e. on `manage.py migrate` and `manage.py check --database default`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from pgqueue.contrib.django import conf, schema
from pgqueue.contrib.django.transactions import is_psycopg3
from pgqueue.db import connect as db
from pgqueue.db import migrate
from pgqueue.errors import ConfigError


def migrate_hint() -> str:
    if schema.enabled():
        return "Run `python manage.py migrate`: it runs pgqueue's migrations too."
    return (
        "Run `python manage.py pgqueue migrate` (PGQUEUE['MIGRATE'] is False, so "
        "`manage.py migrate` does not create pgqueue's tables)."
    )


def register() -> None:
    checks.register(check_config)
    checks.register(check_schema, checks.Tags.database)


def check_config(
    app_configs: Sequence[Any] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    try:
        conf.get_app()
        conf.database_dsn()
    except (ImproperlyConfigured, ImportError, ConfigError) as exc:
        return [checks.Error(str(exc), id="pgqueue.E001")]
    alias = conf.database_alias()
    if not is_psycopg3(alias):
        return [
            checks.Warning(
                f"DATABASES[{alias!r}] runs on psycopg2: task.enqueue() inside "
                "transaction.atomic() cannot join the transaction; it enqueues at "
                "transaction.on_commit instead (a crash right after the commit loses the run).",
                hint="Let Django use psycopg 3 (pgqueue installs it; Django prefers it "
                "when its backend can import it).",
                id="pgqueue.W001",
            )
        ]
    return []


def check_schema(
    app_configs: Sequence[Any] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    alias = conf.database_alias()
    if not databases or alias not in databases:
        return []
    try:
        with db.connect(conf.database_dsn()) as conn:
            found = migrate.current(conn)
    except (ConfigError, ImproperlyConfigured) as exc:
        return [checks.Warning(f"cannot check the pgqueue schema: {exc}", id="pgqueue.W002")]
    wanted = migrate.head()
    if found is None:
        return [
            checks.Warning(
                f"the database of DATABASES[{alias!r}] has no pgqueue schema.",
                hint=migrate_hint(),
                id="pgqueue.W003",
            )
        ]
    if found != wanted:
        return [
            checks.Warning(
                f"the pgqueue schema is at revision {found}; this pgqueue needs {wanted}.",
                hint=migrate_hint(),
                id="pgqueue.W004",
            )
        ]
    return []
