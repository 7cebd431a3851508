"""pgqueue's schema from Django's `manage.py migrate`.

The Run model is unmanaged (pgqueue's own migrations own the tables), so Django's
migration 0001 creates nothing. What does create them: a post_migrate receiver that runs
pgqueue's migrations on the database of PGQUEUE['DATABASE'] whenever `migrate` runs
there, including when Django's test runner (or pytest-django) creates a test database.
PGQUEUE['MIGRATE'] = False turns it off; `manage.py pgqueue migrate` then does it.
"""

from __future__ import annotations

from typing import Any

from pgqueue.contrib.django import conf
from pgqueue.db import migrate


def enabled() -> bool:
    return bool(conf.options().get("MIGRATE", True))


def migrate_with_django(sender: Any, *, using: str, verbosity: int = 1, **kwargs: Any) -> None:
    """post_migrate receiver (for this app only). `flush` sends post_migrate too, without
    a plan: the schema is there already, and flush leaves pgqueue's tables alone."""
    if "plan" not in kwargs or not enabled() or using != conf.database_alias():
        return
    migrate.upgrade(conf.database_dsn(using))
    stdout = kwargs.get("stdout")
    if verbosity >= 1 and stdout is not None:
        stdout.write(f"  pgqueue schema (pgqueue's own migrations) at revision {migrate.head()}")
