"""Tasks of the test project (tests/django_site): PGQUEUE['APP'] is `app`."""

from __future__ import annotations

import logging
from typing import Any

from django.db import connections

import pgqueue
from pgqueue.contrib.django.models import Run

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # Django 5.2: the backport

app = pgqueue.App()


@app.task(max_attempts=1)
def backend_pid(alias: str) -> int:
    """An ORM query on DATABASES[alias], then the server process of that connection."""
    Run.objects.using(alias).filter(id=0).exists()
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid: int = cursor.fetchone()[0]
    return pid


@app.task
def note(text: str) -> str:
    """Writes a row with Django's connection (on psycopg2 in the psycopg2 test)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("INSERT INTO notes (text) VALUES (%s)", [text])
    return type(connections["default"].connection).__module__


@task()
def shout(text: str) -> str:
    return text.upper()


@task()
def chatty(text: str) -> str:
    """Logs on a logger that Django's own LOGGING handles (`django.*`)."""
    logging.getLogger("django.tasks").info("chatty says %s", text)
    return text


@task(takes_context=True)
def whoami(context: Any) -> list[str]:
    """The worker ids of this run's TaskResult, as its task sees them."""
    return list(context.task_result.worker_ids)
