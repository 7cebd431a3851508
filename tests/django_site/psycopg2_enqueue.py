"""Django on psycopg2: what enqueue does inside and outside transaction.atomic().

Run by tests/contrib/django/test_django.py in a process of its own (psycopg 3 must be
hidden from Django before it loads its backend), with
DJANGO_SETTINGS_MODULE=tests.django_site.settings, DJANGO_DB_DRIVER=psycopg2 and
DATABASE_URL (a migrated database). Prints what it saw as JSON; the test asserts on it.
Runs are counted through a connection of its own (psycopg 3), as another process would
see them."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import django

django.setup()

from django.core import checks  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from pgqueue.contrib.django import enqueue_on_commit  # noqa: E402
from pgqueue.testing import drain  # noqa: E402
from tests.django_site.tasks import app, note, shout  # noqa: E402
from tests.helpers import scalar  # noqa: E402

DSN = os.environ["DATABASE_URL"]


def runs() -> list[int]:
    return list(scalar(DSN, "SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM pgqueue.runs"))


def notes() -> list[str]:
    return list(scalar(DSN, "SELECT coalesce(array_agg(text ORDER BY text), '{}') FROM notes"))


def error(read: Callable[[], Any]) -> str | None:
    try:
        read()
    except Exception as exc:
        return type(exc).__name__
    return None


def main() -> dict[str, Any]:
    seen: dict[str, Any] = {}
    connection.ensure_connection()
    seen["driver"] = type(connection.connection).__module__
    seen["checks"] = sorted(m.id for m in checks.run_checks() if m.id.startswith("pgqueue"))
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE notes (text text)")

    # Commit: the row commits with Django's transaction, the run right after it.
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO notes VALUES ('row of the committed block')")
        committed = note.enqueue("committed")
        many = note.enqueue_many([("many 1",), ("many 2",)])
        seen["inside"] = {"runs": runs(), "id": error(lambda: committed.id)}
    seen["committed"] = {
        "runs": runs(),
        "id": committed.id,
        "many": [h.id for h in many],
        "state": committed.get().state,
        "notes": notes(),
    }

    # Rollback: neither the row nor the run.
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO notes VALUES ('row of the rolled back block')")
            rolled_back = note.enqueue("rolled back")
            raise RuntimeError("the block fails")
    except RuntimeError:
        pass
    seen["rolled_back"] = {"runs": runs(), "id": error(lambda: rolled_back.id)}

    # A savepoint that rolls back takes its enqueues along; the outer block's stay.
    with transaction.atomic():
        outer = note.enqueue("outer")
        try:
            with transaction.atomic():
                note.enqueue("inner")
                raise RuntimeError("the inner block fails")
        except RuntimeError:
            pass
        explicit = enqueue_on_commit(note, "on commit")
    seen["nested"] = {"runs": runs(), "outer": outer.id, "explicit": explicit.id}

    # Outside atomic(): autocommit, the run exists at once.
    alone = note.enqueue("alone")
    seen["alone"] = {"id": alone.id, "type": type(alone).__name__, "runs": runs()}

    # Django's tasks framework: the result's id is the run's, set at the commit.
    with transaction.atomic():
        result = shout.enqueue("hello")
        seen["result_inside"] = {"id": result.id, "runs": runs()}
    seen["result"] = {"id": result.id, "runs": runs()}

    # A worker (in this process) runs them all; its threads' Django connections are
    # psycopg2 too.
    seen["drained"] = dict(drain(app))
    seen["notes_after_worker"] = notes()
    seen["drivers"] = sorted({app.get_run(i).result for i in runs() if i != int(result.id)})
    result.refresh()
    seen["result_value"] = result.return_value
    seen["traced"] = traced_enqueue()
    return seen


def traced_enqueue() -> dict[str, Any]:
    """With tracing on, the deferred enqueue's span is a child of the caller's, and the
    run inserted at the commit carries that span's trace context."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from pgqueue.contrib.otel import instrument, uninstrument

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(app, tracer_provider=provider)
    try:
        tracer = provider.get_tracer("request")
        with tracer.start_as_current_span("request") as request, transaction.atomic():
            handle = note.enqueue("traced")
    finally:
        uninstrument(app)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    enqueue = spans["pgqueue.enqueue tests.django_site.tasks.note"]
    return {
        "request": format(request.get_span_context().trace_id, "032x"),
        "enqueue_parent": enqueue.parent.span_id == request.get_span_context().span_id
        if enqueue.parent
        else None,
        "enqueue_span": format(enqueue.context.span_id, "016x"),
        "headers": scalar(DSN, "SELECT headers FROM pgqueue.runs WHERE id = %s", (handle.id,)),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
