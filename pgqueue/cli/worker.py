"""`pgqueue worker`: run tasks, with the --keep-* retention options."""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from typing import Any

import click
from click.core import ParameterSource

from pgqueue import _logging
from pgqueue.cli import _reload
from pgqueue.cli._common import F, db_options, fail, open_app
from pgqueue.errors import UserError
from pgqueue.ops import retention


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


KEPT = ("succeeded", "failed", "canceled", "events", "audit")


def retention_options(fn: F) -> F:
    """--keep-succeeded/--keep-failed/--keep-canceled/--keep-events/--keep-audit and
    --no-prune."""
    defaults = retention.DEFAULT_RETENTION
    what = {
        "succeeded": "succeeded runs (with their steps and errors)",
        "failed": "failed runs",
        "canceled": "canceled runs",
        "events": "events (by created_at)",
        "audit": "the audit log's entries (operators' actions, by time)",
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
        audit=keep["audit"],
    )


@click.command()
@db_options
@click.option("--app", "app_spec", required=True, help="MODULE:ATTR of your pgqueue.App.")
@click.option("--queues", help="Comma-separated queues (default: those the app uses).")
@click.option(
    "--concurrency",
    type=click.IntRange(1),
    help="Runs in progress at once in this process. Default: 100 when every task of the"
    " app is async, else 10.",
)
@click.option(
    "--processes",
    type=click.IntRange(1),
    metavar="N",
    help="Run sync tasks' code in N child processes (for CPU-bound tasks; async tasks and"
    " workflows stay in the worker). --concurrency then defaults to N, and --max-runs and"
    " --max-memory recycle each child. See docs/operations.md, Child processes.",
)
@click.option("--lease-seconds", default=30.0, show_default=True, type=click.FloatRange(1))
@click.option(
    "--grace",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds running tasks get to finish on SIGTERM before release.",
)
@click.option(
    "--poll-interval",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.01),
    help="Seconds between two looks for work when no notification comes (the only way"
    " it finds work with --pooler transaction or PGQUEUE_NOTIFY=off).",
)
@click.option(
    "--pooler",
    type=click.Choice(["none", "session", "transaction"], case_sensitive=False),
    help="What sits between the worker and PostgreSQL (default: the App's pooler, else"
    " $PGQUEUE_POOLER, else none). transaction (PgBouncer pool_mode=transaction): no"
    " LISTEN, no prepared statements, no session settings; the worker polls.",
)
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
    help="Serve Prometheus metrics on this port (needs pgqueue-jobs[metrics]).",
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
    " supervisor to start a fresh process. With --processes: replace each child process"
    " after this many runs.",
)
@click.option(
    "--max-memory",
    "max_memory_mb",
    type=click.FloatRange(0, min_open=True),
    help="Drain and exit 0 once the worker's RSS exceeds this many MiB (checked before"
    " claiming, at most ten times a second), for a supervisor to start a fresh process."
    " With --processes: replace a child process whose RSS exceeds it after a run.",
)
@click.option(
    "--reload",
    is_flag=True,
    help="Development: restart the worker whenever a .py file changes "
    "(needs pgqueue-jobs[reload]).",
)
@click.option(
    "--reload-dir",
    "reload_dirs",
    multiple=True,
    help="Directory --reload watches (repeatable; default: the current directory).",
)
@retention_options
@click.pass_context
def worker(
    ctx: click.Context,
    dsn: str | None,
    embedded: bool,
    app_spec: str,
    queues: str | None,
    concurrency: int | None,
    processes: int | None,
    lease_seconds: float,
    grace: float,
    poll_interval: float,
    pooler: str | None,
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
    keep_audit: timedelta | None,
    no_prune: bool,
    reload: bool,
    reload_dirs: tuple[str, ...],
) -> None:
    """Run tasks until stopped (SIGTERM/SIGINT drain gracefully; a second one exits).

    About once a minute the worker also deletes finished runs, events and audit entries
    older than the --keep-* ages (see docs/operations.md, Retention)."""
    keep = {
        "succeeded": keep_succeeded,
        "failed": keep_failed,
        "canceled": keep_canceled,
        "events": keep_events,
        "audit": keep_audit,
    }
    keep_history = worker_retention(ctx, no_prune, keep)
    if reload_dirs and not reload:
        fail("--reload-dir only applies with --reload")
    if reload and burst:
        fail("--reload restarts a worker that runs until stopped: it cannot go with --burst")
    if reload and not os.environ.get(_reload.CHILD_ENV):
        open_app(dsn, embedded, app_spec)  # a bad --app or DSN fails here, once
        _reload.supervise(reload_dirs, stop_timeout=min(grace, 10) + 2)
        return
    _logging.setup(log_level, log_format)
    app = open_app(dsn, embedded, app_spec, pooler=pooler)
    app_path = app_spec if processes else None
    if processes and app_spec.startswith("pgqueue.contrib."):
        # the App a framework's command configured (manage.py / flask pgqueue): the child
        # processes import it from the module that defines it and its tasks
        from pgqueue.worker.processes import find_app_path

        app_path = find_app_path(app, app.tasks.values())
        if app_path is None:
            fail(
                "--processes: the App is in none of its tasks' modules, where child processes"
                " would import it from: give --app MODULE:ATTR"
            )
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
        processes=processes,
        app_path=app_path,
    )
    from pgqueue.worker import tuned_gc

    with tuned_gc() if tune_gc else contextlib.nullcontext():
        runner.run(burst=burst)
