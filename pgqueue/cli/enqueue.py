"""`pgqueue enqueue` and `pgqueue emit`: write a run or an event from the shell."""

from __future__ import annotations

import json
from typing import Literal

import click

from pgqueue.cli._common import (
    db_options,
    echo_json,
    fail,
    json_option,
    open_app,
    parse_json,
    recorded,
)
from pgqueue.db import sql as _sql


@click.command()
@db_options
@click.argument("task")
@click.option("--args", "args_json", help="Positional arguments as a JSON array.")
@click.option("--kwargs", "kwargs_json", help="Keyword arguments as a JSON object.")
@click.option("--queue", help="Queue (default: the task's, else 'default').")
@click.option("--delay", type=click.FloatRange(0), help="Seconds before the run is due.")
@click.option("--priority", type=int, help="Lower runs first (default 0).")
@click.option("--max-attempts", type=click.IntRange(1))
@click.option("--idempotency-key")
@click.option("--unique-key", help="At most one run with this key in its scope.")
@click.option(
    "--unique-while",
    type=click.Choice(["queued", "active", "retained"]),
    help="The unique key's scope (default queued).",
)
@click.option(
    "--unique-for", type=click.FloatRange(0, min_open=True), help="Scope window, in seconds."
)
@click.option(
    "--on-duplicate",
    type=click.Choice(["skip", "replace", "cancel_running"]),
    help="What an enqueue whose unique key is taken does (default skip).",
)
@click.option(
    "--after",
    "after",
    type=click.IntRange(1),
    multiple=True,
    metavar="ID",
    help="Start only after run ID has finished (repeatable).",
)
@click.option(
    "--on-dependency-failure",
    type=click.Choice(["cancel", "run"]),
    help="If a run of --after fails or is canceled: cancel this one (default) or run it.",
)
@click.option("--app", "app_spec", help="MODULE:ATTR: check TASK and its arguments against it.")
@json_option
def enqueue(
    dsn: str | None,
    embedded: bool,
    task: str,
    args_json: str | None,
    kwargs_json: str | None,
    queue: str | None,
    delay: float | None,
    priority: int | None,
    max_attempts: int | None,
    idempotency_key: str | None,
    unique_key: str | None,
    unique_while: str | None,
    unique_for: float | None,
    on_duplicate: str | None,
    after: tuple[int, ...],
    on_dependency_failure: Literal["cancel", "run"] | None,
    app_spec: str | None,
    as_json: bool,
) -> None:
    """Enqueue a run of TASK (by its registered name).

    A run given --after waits (state `waiting`) until every run it names has
    finished; an id that names no run is refused."""
    args = parse_json("--args", args_json, list)
    kwargs = parse_json("--kwargs", kwargs_json, dict)
    app = open_app(dsn, embedded, app_spec)
    if app_spec:
        app.get_task(task)
    else:
        with app.connection() as conn:
            known = {row[0] for row in conn.execute(_sql.query("known_tasks"))}
        if task not in known:
            hint = f" (live workers know: {', '.join(sorted(known))})" if known else ""
            fail(
                f"unknown task {task!r}: no live worker registers it; pass --app MODULE:ATTR "
                f"to check against your code{hint}"
            )
    # an option left out is None, as in EnqueueOptions: the task's own (or the default)
    handle = app.enqueue_by_name(
        task,
        args,
        kwargs,
        queue=queue,
        delay=delay,
        priority=priority,
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        unique_key=unique_key,
        unique_while=unique_while,
        unique_for=unique_for,
        on_duplicate=on_duplicate,
        after=after or None,
        on_dependency_failure=on_dependency_failure,
    )
    if as_json:
        echo_json({"id": handle.id, "created": handle.created})
    else:
        click.echo(f"run {handle.id} {'enqueued' if handle.created else 'already exists'}")


@click.command()
@db_options
@click.argument("event")
@click.option("--key", help="Only waiters on this key wake.")
@click.option("--payload", "payload_json", help="JSON payload handed to the waiters.")
@click.option("--delay", type=click.FloatRange(0), help="Deliver after this many seconds.")
def emit(
    dsn: str | None,
    embedded: bool,
    event: str,
    key: str | None,
    payload_json: str | None,
    delay: float | None,
) -> None:
    """Emit EVENT: wakes workflows waiting for it (ctx.wait_for_event)."""
    payload = None
    if payload_json is not None:
        try:
            payload = json.loads(payload_json)
        except json.JSONDecodeError as exc:
            fail(f"--payload is not valid JSON ({exc.msg} at position {exc.pos})")
        except RecursionError:
            fail("--payload nests too deeply to parse: flatten it")
    app = open_app(dsn, embedded)
    event_id = app.emit_event(event, key=key, payload=payload, delay=delay)
    recorded(app, "emit_event", target={"event": event, "key": key})
    click.echo(f"event {event_id} emitted")
