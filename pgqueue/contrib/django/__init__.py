"""pgqueue for Django: add "pgqueue.contrib.django" to INSTALLED_APPS. See docs/django.md.

- enqueue inside transaction.atomic() joins Django's transaction (psycopg 3), or waits
  for its commit (psycopg2)
- `manage.py pgqueue worker|migrate|runs|...`, a system check for the schema
- workers refresh Django's connections around each run, as Django does around requests
- PgQueueBackend for Django's tasks framework (django.tasks or django_tasks), an admin
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgqueue.contrib.django.backend import PgQueueBackend
    from pgqueue.contrib.django.conf import get_app
    from pgqueue.contrib.django.transactions import enqueue_on_commit

__all__ = ["PgQueueBackend", "enqueue_on_commit", "get_app"]


def __getattr__(name: str) -> Any:
    # Imported lazily: this package is imported while Django populates INSTALLED_APPS,
    # before settings and models may be touched.
    if name == "get_app":  # the project's App (settings.PGQUEUE['APP'])
        from pgqueue.contrib.django.conf import get_app

        return get_app
    if name == "PgQueueBackend":
        from pgqueue.contrib.django.backend import PgQueueBackend

        return PgQueueBackend
    if name == "enqueue_on_commit":
        from pgqueue.contrib.django.transactions import enqueue_on_commit

        return enqueue_on_commit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
