"""The `pgqueue` command line. User errors print one line on stderr and exit 2."""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import click
import psycopg
from click.core import ParameterSource

from pgqueue import _logging, _sql, db, grants, migrate, retention
from pgqueue._terminal import printable
from pgqueue.app import App
from pgqueue.errors import PgQueueError, RunNotFound, UserError

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str) -> None:
    raise UserError(message)


# -- shared options ---------------------------------------------------------------------


def db_options(fn: F) -> F:
    """--dsn and --embedded, on every command."""
    fn = click.option(
        "--embedded",
        is_flag=True,
        help="Use the shared local embedded PostgreSQL (started if needed).",
    )(fn)
    fn = click.option(
        "--dsn",
        default=None,
        help="PostgreSQL DSN (default: the App's own dsn, else $PGQUEUE_DSN).",
    )(fn)
    return fn


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def resolve_dsn(dsn: str | None, embedded: bool) -> str:
    """--dsn > --embedded > $PGQUEUE_DSN (an App's own dsn is applied by open_app)."""
    if dsn and embedded:
        fail("give either --dsn or --embedded, not both")
    if embedded:
        from pgqueue import embedded as emb

        return emb.ensure_server()
    return db.resolve_dsn(dsn)


def load_app(spec: str) -> App:
    """Import MODULE:ATTR (the current directory is importable, as with uvicorn)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        fail(f"--app must look like MODULE:ATTR (e.g. myproject.tasks:app), not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        fail(f"cannot import {module_name!r} (from --app {spec}): {exc}")
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        fail(f"{spec}: {attr!r} in {module_name} is not a pgqueue.App (found {type(app).__name__})")
    assert isinstance(app, App)
    return app


def open_app(dsn: str | None, embedded: bool, spec: str | None = None) -> App:
    app = load_app(spec) if spec else App()
    if dsn or embedded or app._dsn is None:
        app.configure(dsn=resolve_dsn(dsn, embedded))
    # Close the pool when the command ends (it reopens if the App is used again): a pool
    # left to the garbage collector may be collected in one of its own threads, which
    # psycopg_pool reports as "cannot join current thread" (seen under Django's
    # call_command, where the process lives on).
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(app.close)
    app.check_schema()
    return app


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    if not rows:
        click.echo("(none)")
        return
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    click.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (list, dict)):
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + "..."
    text = printable(str(value))
    return text if len(text) <= 60 else text[:57] + "..."


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    """A retention age: 7d, 12h, 30m, 1d12h or plain seconds (retention.parse_duration),
    or the word forever (None: keep forever)."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, timedelta):
            return value
        text = str(value)
        if text.strip().lower() == "forever":
            return None
        try:
            age = retention.parse_duration(text)
        except UserError as exc:
            self.fail(f"{exc}, or forever", param, ctx)
        if age < timedelta(0):
            self.fail(f"{text!r} is negative; give an age such as 7d", param, ctx)
        return age


KEPT = ("succeeded", "failed", "canceled", "events")


def retention_options(fn: F) -> F:
    """--keep-succeeded/--keep-failed/--keep-canceled/--keep-events and --no-prune."""
    defaults = retention.DEFAULT_RETENTION
    what = {
        "succeeded": "succeeded runs (with their steps and errors)",
        "failed": "failed runs",
        "canceled": "canceled runs",
        "events": "events (by created_at)",
    }
    fn = click.option(
        "--no-prune",
        is_flag=True,
        help="This worker never deletes history (other workers or `pgqueue prune` may).",
    )(fn)
    for field in reversed(KEPT):
        fn = click.option(
            f"--keep-{field}",
            type=Duration(),
            default=_age_text(getattr(defaults, field)),
            show_default=True,
            metavar="AGE",
            help=f"Delete {what[field]} older than AGE (7d, 12h, 30m, 1d12h, forever).",
        )(fn)
    return fn


def _age_text(age: timedelta | None) -> str:
    if age is None:
        return "forever"
    seconds = int(age.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def worker_retention(
    ctx: click.Context, no_prune: bool, keep: dict[str, timedelta | None]
) -> retention.Retention | None:
    """The worker's Retention from --keep-* (None: forever) and --no-prune."""
    if no_prune:
        given = [
            f"--keep-{field}"
            for field in KEPT
            if ctx.get_parameter_source(f"keep_{field}")
            in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
        ]
        if given:
            fail(f"--no-prune contradicts {', '.join(given)}: give one or the other")
        return None
    return retention.Retention(
        succeeded=keep["succeeded"],
        failed=keep["failed"],
        canceled=keep["canceled"],
        events=keep["events"],
    )


def parse_json(option: str, text: str | None, kind: type) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{option} is not valid JSON ({exc.msg} at position {exc.pos}): {text!r}")
    except RecursionError:
        fail(f"{option} nests too deeply to parse: flatten it")
    if not isinstance(value, kind):
        want = (
            "a JSON array, e.g. '[1, \"a\"]'"
            if kind is list
            else 'a JSON object, e.g. \'{"to": "a@b.c"}\''
        )
        fail(f"{option} must be {want}")
    return value


# -- commands ---------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pgqueue")
def cli() -> None:
    """pgqueue: durable background jobs and workflows in PostgreSQL."""


@cli.command("migrate")
@db_options
@click.option("--sql", "print_sql", is_flag=True, help="Print the SQL instead of running it.")
def migrate_cmd(dsn: str | None, embedded: bool, print_sql: bool) -> None:
    """Create or update the pgqueue schema (idempotent)."""
    if print_sql:
        click.echo(migrate.upgrade_sql())
        return
    target = resolve_dsn(dsn, embedded)
    db.connect(target).close()
    migrate.upgrade(target)
    click.echo(f"pgqueue schema is at revision {migrate.head()}")


@cli.command("grants")
@db_options
@click.argument("role")
@click.option(
    "--as",
    "kind",
    required=True,
    type=click.Choice(grants.KINDS),
    help="What ROLE does: run workers, enqueue and wait, inspect, or own (migrate).",
)
@click.option(
    "--apply",
    "apply_now",
    is_flag=True,
    help="Run the statements (as the owner of schema pgqueue) instead of printing them.",
)
def grants_cmd(dsn: str | None, embedded: bool, role: str, kind: str, apply_now: bool) -> None:
    """The GRANT statements ROLE needs (docs/security.md), for the migrated schema."""
    from psycopg import errors as pg_errors

    with db.connect(resolve_dsn(dsn, embedded)) as conn, db.translate_errors(conn):
        migrate.check(conn)
        statements = grants.statements(conn, role, kind)
        if not apply_now:
            for statement in statements:
                click.echo(statement.as_string(conn) + ";")
            return
        try:
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
        except pg_errors.UndefinedObject as exc:
            fail(f"{db.first_line(exc)}: create the role first (CREATE ROLE ... LOGIN)")
        except pg_errors.InsufficientPrivilege as exc:
            fail(
                f"{db.first_line(exc)}: run `pgqueue grants --apply` as the owner of schema "
                "pgqueue or as a superuser (or print the statements and have them run)"
            )
    click.echo(f"role {role} has the {kind} grants ({len(statements)} statements)")


@cli.command()
@db_options
@click.option("--app", "app_spec", required=True, help="MODULE:ATTR of your pgqueue.App.")
@click.option("--queues", help="Comma-separated queues (default: those the app uses).")
@click.option("--concurrency", default=10, show_default=True, type=click.IntRange(1))
@click.option("--lease-seconds", default=30.0, show_default=True, type=click.FloatRange(1))
@click.option(
    "--grace",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds running tasks get to finish on SIGTERM before release.",
)
@click.option("--poll-interval", default=5.0, show_default=True, type=click.FloatRange(0.01))
@click.option("--burst", is_flag=True, help="Exit when the queues hold nothing due.")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="json: one JSON object per line, with each run transition's fields as keys.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics on this port (needs pgqueue[metrics]).",
)
@click.option(
    "--tune-gc/--no-tune-gc",
    default=True,
    show_default=True,
    help="Freeze start-up objects and collect the young generation every 10,000"
    " allocations (gc): 10-20% less worker CPU per short run. See docs/scaling.md.",
)
@click.option(
    "--max-runs",
    type=click.IntRange(1),
    help="Drain and exit 0 once this many runs were claimed (exactly that many), for a"
    " supervisor to start a fresh process.",
)
@click.option(
    "--max-memory",
    "max_memory_mb",
    type=click.FloatRange(0, min_open=True),
    help="Drain and exit 0 once the worker's RSS exceeds this many MiB (checked before"
    " claiming, at most ten times a second), for a supervisor to start a fresh process.",
)
@retention_options
@click.pass_context
def worker(
    ctx: click.Context,
    dsn: str | None,
    embedded: bool,
    app_spec: str,
    queues: str | None,
    concurrency: int,
    lease_seconds: float,
    grace: float,
    poll_interval: float,
    burst: bool,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    tune_gc: bool,
    max_runs: int | None,
    max_memory_mb: float | None,
    keep_succeeded: timedelta | None,
    keep_failed: timedelta | None,
    keep_canceled: timedelta | None,
    keep_events: timedelta | None,
    no_prune: bool,
) -> None:
    """Run tasks until stopped (SIGTERM/SIGINT drain gracefully; a second one exits).

    About once a minute the worker also deletes finished runs and events older than the
    --keep-* ages (see docs/operations.md, Retention)."""
    keep = {
        "succeeded": keep_succeeded,
        "failed": keep_failed,
        "canceled": keep_canceled,
        "events": keep_events,
    }
    keep_history = worker_retention(ctx, no_prune, keep)
    _logging.setup(log_level, log_format)
    app = open_app(dsn, embedded, app_spec)
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
    runner = app.worker(
        queues=names,
        concurrency=concurrency,
        lease_seconds=lease_seconds,
        grace=grace,
        poll_interval=poll_interval,
        metrics_port=metrics_port,
        retention=keep_history,
        max_runs=max_runs,
        max_memory_mb=max_memory_mb,
    )
    from pgqueue.worker import tuned_gc

    with tuned_gc() if tune_gc else contextlib.nullcontext():
        runner.run(burst=burst)


@cli.command()
@db_options
@click.argument("task")
@click.option("--args", "args_json", help="Positional arguments as a JSON array.")
@click.option("--kwargs", "kwargs_json", help="Keyword arguments as a JSON object.")
@click.option("--queue", help="Queue (default: the task's, else 'default').")
@click.option("--delay", type=click.FloatRange(0), help="Seconds before the run is due.")
@click.option("--priority", type=int, help="Lower runs first (default 0).")
@click.option("--max-attempts", type=click.IntRange(1))
@click.option("--idempotency-key")
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
    app_spec: str | None,
    as_json: bool,
) -> None:
    """Enqueue a run of TASK (by its registered name)."""
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
    opts = {
        k: v
        for k, v in {
            "queue": queue,
            "delay": delay,
            "priority": priority,
            "max_attempts": max_attempts,
            "idempotency_key": idempotency_key,
        }.items()
        if v is not None
    }
    handle = app.enqueue_by_name(task, args, kwargs, **opts)
    if as_json:
        echo_json({"id": handle.id, "created": handle.created})
    else:
        click.echo(f"run {handle.id} {'enqueued' if handle.created else 'already exists'}")


@cli.command()
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
    event_id = open_app(dsn, embedded).emit_event(event, key=key, payload=payload, delay=delay)
    click.echo(f"event {event_id} emitted")


@cli.group()
def runs() -> None:
    """Inspect and manage runs."""


RUN_COLUMNS = ["id", "task", "queue", "state", "attempt", "max_attempts", "created_at", "error"]


@runs.command("list")
@db_options
@click.option(
    "--state",
    type=click.Choice(
        ["scheduled", "queued", "running", "waiting", "succeeded", "failed", "canceled"]
    ),
)
@click.option("--queue")
@click.option("--task")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10000))
@json_option
def runs_list(
    dsn: str | None,
    embedded: bool,
    state: str | None,
    queue: str | None,
    task: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Newest runs first."""
    app = open_app(dsn, embedded)
    found = app.list_runs(state=state, queue=queue, task=task, limit=limit)
    if as_json:
        echo_json([r.to_json() for r in found])
    else:
        table([r.to_json() | {"created_at": r.created_at} for r in found], RUN_COLUMNS)


@runs.command("show")
@db_options
@click.argument("run_id", type=int)
@json_option
def runs_show(dsn: str | None, embedded: bool, run_id: int, as_json: bool) -> None:
    """One run with its error history."""
    app = open_app(dsn, embedded)
    run = app.get_run(run_id)
    errors = app.run_errors(run_id)
    if as_json:
        echo_json(run.to_json() | {"errors": errors, "steps": app.run_steps(run_id)})
        return
    for key, value in run.to_json().items():
        shown = json.dumps(value) if key in ("args", "kwargs", "result") else _cell(value)
        click.echo(f"{key:>17}: {shown}")
    for e in errors:
        click.echo(
            f"\nattempt {e['attempt']} [{printable(str(e['kind']))}] "
            f"{e['created_at']:%Y-%m-%d %H:%M:%S}: {printable(str(e['message']))}"
        )
        if e["traceback"]:
            click.echo(printable(e["traceback"].rstrip(), lines=True))


@runs.command("cancel")
@db_options
@click.argument("run_id", type=int)
@click.option("--children", is_flag=True, help="Cancel its child runs too.")
def runs_cancel(dsn: str | None, embedded: bool, run_id: int, children: bool) -> None:
    """Cancel a run that has not finished (a running one is told to stop)."""
    app = open_app(dsn, embedded)
    app.get_run(run_id)
    if app.cancel(run_id, children=children):
        click.echo(f"run {run_id} canceled")
    else:
        fail(f"run {run_id} has already finished; nothing to cancel")


@runs.command("retry")
@db_options
@click.argument("run_id", type=int)
def runs_retry(dsn: str | None, embedded: bool, run_id: int) -> None:
    """Queue a finished run again for one more attempt."""
    app = open_app(dsn, embedded)
    app.get_run(run_id)
    if app.retry(run_id):
        click.echo(f"run {run_id} queued again")
    else:
        fail(f"run {run_id} has not finished; only finished runs can be retried")


QUEUE_COLUMNS = [
    "queue",
    "paused",
    "queued",
    "scheduled",
    "running",
    "waiting",
    "succeeded",
    "failed",
    "canceled",
    "oldest_queued_seconds",
    "concurrency",
    "group_concurrency",
]


@cli.group(invoke_without_command=True)
@db_options
@json_option
@click.pass_context
def queues(ctx: click.Context, dsn: str | None, embedded: bool, as_json: bool) -> None:
    """Per-queue counts (or: pause / resume a queue)."""
    if ctx.invoked_subcommand is not None:
        return
    app = open_app(dsn, embedded)
    summary = app.queue_summary()
    if as_json:
        echo_json(summary)
        return
    table(summary, QUEUE_COLUMNS)
    busiest = [g for g in app.groups(limit=5) if g["group_key"]]
    if busiest:
        click.echo("\nbusiest groups:")
        table(busiest, ["queue", "group_key", "running", "queued", "deferred"])


def _pause_command(name: str, paused: bool) -> None:
    @queues.command(name)
    @db_options
    @click.argument("queue")
    def command(dsn: str | None, embedded: bool, queue: str) -> None:
        open_app(dsn, embedded).set_paused(queue, paused)
        click.echo(f"queue {queue} {'paused' if paused else 'resumed'}")

    command.__doc__ = (
        "Stop workers claiming from QUEUE (running runs finish)."
        if paused
        else "Let workers claim from QUEUE again."
    )


_pause_command("pause", True)
_pause_command("resume", False)


@queues.command("set")
@db_options
@click.argument("queue")
@click.option(
    "--concurrency",
    type=click.IntRange(0, 2**31 - 1),
    help="Max running runs of QUEUE across all workers (0: no limit).",
)
@click.option(
    "--group-concurrency",
    type=click.IntRange(0, 2**31 - 1),
    help="Max running runs per group in QUEUE (0: no limit).",
)
def queues_set(
    dsn: str | None,
    embedded: bool,
    queue: str,
    concurrency: int | None,
    group_concurrency: int | None,
) -> None:
    """Change QUEUE's cluster-wide limits now (workers apply them to their next claim)."""
    app = open_app(dsn, embedded)
    current = {q["queue"]: q for q in app.queue_summary()}.get(queue, {})
    new_c = current.get("concurrency") if concurrency is None else (concurrency or None)
    new_g = (
        current.get("group_concurrency")
        if group_concurrency is None
        else (group_concurrency or None)
    )
    app.set_limits(queue, concurrency=new_c, group_concurrency=new_g)
    click.echo(
        f"queue {queue}: concurrency {new_c or 'unlimited'}, "
        f"group_concurrency {new_g or 'unlimited'}"
    )


@queues.command("groups")
@db_options
@click.option("--queue")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000))
@json_option
def queues_groups(
    dsn: str | None, embedded: bool, queue: str | None, limit: int, as_json: bool
) -> None:
    """The busiest groups: running (valid leases) and queued counts."""
    rows = open_app(dsn, embedded).groups(queue, limit)
    if as_json:
        echo_json(rows)
    else:
        table(rows, ["queue", "group_key", "running", "queued", "deferred", "last_started_at"])


@cli.command()
@db_options
@json_option
def workers(dsn: str | None, embedded: bool, as_json: bool) -> None:
    """Registered workers and their heartbeats."""
    rows = open_app(dsn, embedded).list_workers()
    if as_json:
        echo_json(rows)
    else:
        table(rows, ["id", "host", "pid", "queues", "concurrency", "running", "heartbeat_age"])


@cli.command()
@click.option(
    "--dsn", envvar=db.DSN_ENV, default=None, help="Use this server instead of the embedded one."
)
@click.option("--runs", "count", default=200, show_default=True, type=click.IntRange(1, 100000))
def demo(dsn: str | None, count: int) -> None:
    """Show pgqueue working: a batch of tasks through a real worker, then inspection."""
    from pgqueue import demo as demo_module

    demo_module.run(dsn, count)


# -- schedules, retention, stats -------------------------------------------------------

SCHEDULE_COLUMNS = [
    "name",
    "cron",
    "tz",
    "task",
    "queue",
    "enabled",
    "paused",
    "next_fire_at",
    "last_fire_at",
    "last_run_id",
    "last_run_state",
]


@cli.group(invoke_without_command=True)
@db_options
@json_option
@click.pass_context
def schedules(ctx: click.Context, dsn: str | None, embedded: bool, as_json: bool) -> None:
    """Cron schedules (or: pause / resume / trigger one)."""
    if ctx.invoked_subcommand is not None:
        return
    rows = open_app(dsn, embedded).list_schedules()
    if as_json:
        echo_json(rows)
    else:
        table(rows, SCHEDULE_COLUMNS)


@schedules.command("pause")
@db_options
@click.argument("name")
def schedules_pause(dsn: str | None, embedded: bool, name: str) -> None:
    """Stop NAME from firing until resumed."""
    open_app(dsn, embedded).pause_schedule(name)
    click.echo(f"schedule {name} paused")


@schedules.command("resume")
@db_options
@click.argument("name")
def schedules_resume(dsn: str | None, embedded: bool, name: str) -> None:
    """Let NAME fire again, from its next tick (ticks missed while paused are skipped)."""
    open_app(dsn, embedded).resume_schedule(name)
    click.echo(f"schedule {name} resumed")


@schedules.command("trigger")
@db_options
@click.argument("name")
@json_option
def schedules_trigger(dsn: str | None, embedded: bool, name: str, as_json: bool) -> None:
    """Enqueue one run of NAME now, outside its cron."""
    handle = open_app(dsn, embedded).trigger_schedule(name)
    if as_json:
        echo_json({"id": handle.id})
    else:
        click.echo(f"run {handle.id} enqueued")


@cli.command()
@db_options
@click.option(
    "--older-than", required=True, help="Finished before this long ago: 7d, 12h, 30m, 1d12h..."
)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(list(retention.FINISHED_STATES)),
    help="Only runs in this state (repeatable; default: every finished state).",
)
@click.option("--events", is_flag=True, help="Also delete events created before then.")
@json_option
def prune(
    dsn: str | None,
    embedded: bool,
    older_than: str,
    states: tuple[str, ...],
    events: bool,
    as_json: bool,
) -> None:
    """Delete finished runs (with their steps and errors) older than --older-than."""
    age = retention.parse_duration(older_than)
    deleted = open_app(dsn, embedded).prune(
        age, states=states or retention.FINISHED_STATES, events=events
    )
    if as_json:
        echo_json(deleted)
    else:
        click.echo("deleted " + ", ".join(f"{n} {what}" for what, n in deleted.items()))


@cli.command()
@db_options
@click.option("--watch", is_flag=True, help="Redraw every --interval seconds until Ctrl-C.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(0.1))
@json_option
def stats(dsn: str | None, embedded: bool, watch: bool, interval: float, as_json: bool) -> None:
    """Queues, rates, latencies and live workers (pgqueue.queue_stats, workers_live)."""
    from pgqueue import stats as stats_view

    app = open_app(dsn, embedded)
    try:
        while True:
            with app.connection() as conn:
                snap = stats_view.snapshot(conn)
            if as_json:
                echo_json(snap)
            else:
                if watch:
                    click.clear()
                click.echo(stats_view.render(snap))
            if not watch:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


@cli.command()
@db_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option("--read-only", is_flag=True, help="Refuse every action (403).")
@click.option(
    "--token",
    envvar="PGQUEUE_DASHBOARD_TOKEN",
    help="Require this token (Bearer header or login form); needed off loopback. "
    "Default: $PGQUEUE_DASHBOARD_TOKEN.",
)
@click.option("--root-path", default="", help="URL prefix when behind a proxy (e.g. /pgqueue).")
def dashboard(
    dsn: str | None,
    embedded: bool,
    host: str,
    port: int,
    read_only: bool,
    token: str | None,
    root_path: str,
) -> None:
    """Serve the web dashboard (docs/dashboard.md)."""
    try:
        from pgqueue.dashboard import serve
    except ImportError as exc:
        fail(f"the dashboard needs {exc.name}: pip install 'pgqueue[dashboard]'")

    serve.check_bind(host, token)
    app = open_app(dsn, embedded)
    serve.run(app, host=host, port=port, read_only=read_only, token=token, root_path=root_path)


# -- entry point ------------------------------------------------------------------------


def main(
    argv: list[str] | None = None,
    *,
    prog_name: str = "pgqueue",
    default_map: dict[str, Any] | None = None,
) -> None:
    """Run the CLI and exit. `default_map` gives option defaults per command (the Django
    and Flask integrations pass their DSN and app this way)."""
    try:
        rv = cli.main(
            args=argv, prog_name=prog_name, standalone_mode=False, default_map=default_map
        )
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        _error(f"{exc.format_message()}{hint}", argv, default_map)
        sys.exit(2)
    except (UserError, RunNotFound) as exc:
        _error(str(exc), argv, default_map)
        sys.exit(2)
    except psycopg.errors.InsufficientPrivilege as exc:
        _error(str(db.permission_denied(exc, None)), argv, default_map)
        sys.exit(2)
    except psycopg.DataError as exc:
        # SQLSTATE class 22: a value the database cannot store (integer or interval out of
        # range, a NUL byte...), whichever option it came from.
        _error(f"a value is out of range or invalid: {db.first_line(exc)}", argv, default_map)
        sys.exit(2)
    except psycopg.OperationalError as exc:
        _error(f"database: {db.first_line(exc)}", argv, default_map)
        sys.exit(2)
    except PgQueueError as exc:
        _error(str(exc), argv, default_map)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)


def _error(message: str, argv: list[str] | None, default_map: dict[str, Any] | None) -> None:
    """Print `message` as the one line `error: ...` on stderr, without any password of a
    DSN this command could have used (--dsn, $PGQUEUE_DSN, an integration's default)."""
    args = sys.argv[1:] if argv is None else argv
    dsns = [os.environ.get(db.DSN_ENV)]
    dsns += [v for k, v in itertools.pairwise(args) if k == "--dsn"]
    dsns += [a.split("=", 1)[1] for a in args if a.startswith("--dsn=")]
    dsns += [str(v) for v in _values(default_map or {}, "dsn")]
    text = " ".join(message.split()) or "unknown error"
    click.echo(f"error: {db.scrub(text, dsns)}", err=True)


def _values(tree: dict[str, Any], key: str) -> list[Any]:
    """Every value of `key` in a click default_map (nested per command)."""
    found = []
    for k, v in tree.items():
        if isinstance(v, dict):
            found += _values(v, key)
        elif k == key and v:
            found.append(v)
    return found
