"""`pgqueue runs`: list, show, cancel and retry runs; the argument search index."""

from __future__ import annotations

import json
from typing import Any

import click

from pgqueue.cli import _bulk
from pgqueue.cli._common import (
    cell,
    db_options,
    echo_json,
    fail,
    json_option,
    open_app,
    recorded,
    resolve_dsn,
    table,
    when,
)
from pgqueue.db import connect as db
from pgqueue.db import migrate
from pgqueue.ops import search_indexes
from pgqueue.ops.inspect import wait_text
from pgqueue.runs.terminal import printable, run_ids_text, seconds_text
from pgqueue.states import STATES


@click.group()
def runs() -> None:
    """Inspect and manage runs."""


RUN_COLUMNS = ["id", "task", "queue", "state", "attempt", "max_attempts", "created_at", "error"]


@runs.command("list")
@db_options
@click.option(
    "--state",
    type=click.Choice([s.value for s in STATES]),
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


# fields `runs show` leaves out when they hold nothing (waiting_for: a line of its own)
OPTIONAL_FIELDS = ("progress", "cancel_reason", "after", "on_dependency_failure")


def backoff_text(b: dict[str, Any]) -> str:
    """A backoff of run_backoffs.sql for people, with what lifts it."""
    at = b["until"]
    until = "until resumed" if at.year >= 9999 else f"until {at:%Y-%m-%d %H:%M:%S %Z}"
    queue = printable(b["queue"])
    if b["scope"] == "queue":
        return f"queue {queue} backed off {until} (pgqueue queues resume {queue})"
    group = printable(b["group_key"])
    return (
        f"group {group} of queue {queue} backed off {until} "
        f"(pgqueue queues resume {queue} --group {group})"
    )


@runs.command("show")
@db_options
@click.argument("run_id", type=int)
@json_option
def runs_show(dsn: str | None, embedded: bool, run_id: int, as_json: bool) -> None:
    """One run with its error history."""
    app = open_app(dsn, embedded)
    run = app.get_run(run_id)
    errors = app.run_errors(run_id)
    steps = app.run_steps(run_id)
    if as_json:
        echo_json(run.to_json() | {"errors": errors, "steps": steps})
        return
    fields = {
        key: value
        for key, value in run.to_json().items()
        if not (key in OPTIONAL_FIELDS and value is None) and key != "waiting_for"
    }
    width = max(17, *map(len, fields))
    for key, value in fields.items():
        if key == "after":
            value = run_ids_text(value)
        shown = (
            json.dumps(value) if key in ("args", "kwargs", "result", "progress") else cell(value)
        )
        click.echo(f"{key:>{width}}: {shown}")
    if run.waiting_for:  # a run held back by its dependencies (task.options(after=...))
        click.echo(f"\nwaiting for {run_ids_text(run.waiting_for)}")
    for b in app.run_backoffs(run_id):  # RetryAfter(scope="queue" | "group")
        click.echo(f"\nheld back: {backoff_text(b)}")
    if steps:
        click.echo("\nsteps:")
        for st in steps:
            took = "" if st["seconds"] is None else f" took {seconds_text(st['seconds'])}"
            since = "" if st["started_at"] is None else f" started {st['started_at']:%H:%M:%S}"
            waited = wait_text(st)
            click.echo(
                f"  {printable(st['name'])} [{st['state']}] attempt {st['attempt']}{since}{took}"
                + (f": {waited}" if waited else "")
                + (f": {printable(st['error'])}" if st["error"] else "")
            )
    for e in errors:
        click.echo(
            f"\nattempt {e['attempt']} [{printable(str(e['kind']))}] "
            f"{when(e['created_at'])}: {printable(str(e['message']))}"
        )
        if e["traceback"]:
            click.echo(printable(e["traceback"].rstrip(), lines=True))


@runs.command("cancel")
@db_options
@click.argument("run_id", type=int, required=False)
@click.option("--children", is_flag=True, help="Cancel its child runs too (one run only).")
@click.option("--reason", help="Why: stored with each run it cancels (cancel_reason).")
@_bulk.filter_options
def runs_cancel(
    dsn: str | None,
    embedded: bool,
    run_id: int | None,
    children: bool,
    reason: str | None,
    **bulk: Any,
) -> None:
    """Cancel a run that has not finished (a running one is told to stop), or every
    unfinished run that matches the filters: prints how many and asks first (--yes:
    don't ask)."""
    app = open_app(dsn, embedded)
    if run_id is None:
        yes, size = bulk.pop("yes"), bulk.pop("batch_size")
        filt = _bulk.build_filter(**bulk)
        _bulk.run(app.database, "cancel", filt, yes=yes, batch_size=size, reason=reason)
        return
    _no_filters(bulk)
    app.get_run(run_id)
    if app.cancel(run_id, children=children, reason=reason):
        recorded(app, "cancel", run_id=run_id, reason=reason)
        click.echo(f"run {run_id} canceled" + (f": {printable(reason)}" if reason else ""))
    else:
        fail(f"run {run_id} has already finished; nothing to cancel")


@runs.command("retry")
@db_options
@click.argument("run_id", type=int, required=False)
@_bulk.filter_options
def runs_retry(dsn: str | None, embedded: bool, run_id: int | None, **bulk: Any) -> None:
    """Queue a finished run again for one more attempt, or every finished run that
    matches the filters: prints how many and asks first (--yes: don't ask)."""
    app = open_app(dsn, embedded)
    if run_id is None:
        yes, size = bulk.pop("yes"), bulk.pop("batch_size")
        _bulk.run(app.database, "retry", _bulk.build_filter(**bulk), yes=yes, batch_size=size)
        return
    _no_filters(bulk)
    app.get_run(run_id)
    if app.retry(run_id):
        recorded(app, "retry", run_id=run_id)
        click.echo(f"run {run_id} queued again")
    else:
        fail(f"run {run_id} has not finished; only finished runs can be retried")


def _no_filters(bulk: dict[str, Any]) -> None:
    given = [k for k in ("states", "queue", "task", "group", "older_than") if bulk[k]]
    if given or bulk["all_runs"]:
        names = [f"--{k.rstrip('s').replace('_', '-')}" for k in given]
        fail(
            f"give either a run id or filters, not both ({', '.join(names) or '--all'} "
            "with a run id)"
        )


@runs.command("search-index")
@db_options
@click.option(
    "--by",
    "kind",
    type=click.Choice(sorted(search_indexes.SEARCH_INDEXES)),
    default="arguments",
    show_default=True,
    help="Which filter: runs by argument values, one task's runs, or one group's runs.",
)
@click.option("--drop", is_flag=True, help="Drop the index instead.")
def runs_search_index(dsn: str | None, embedded: bool, kind: str, drop: bool) -> None:
    """Build an index that makes one of the dashboard's filters exact at any depth.

    Not built by `pgqueue migrate`: every enqueue, claim or finish writes its entries
    (measured: arguments 11-14% of processing; task 0.78x bulk enqueues and an index entry
    more per finished run; group's are of task's shape, written for runs with a group
    only). Built and dropped CONCURRENTLY: work goes on. Without it,
    that filter reads 2,000 runs a page."""
    index = search_indexes.SEARCH_INDEXES[kind]
    with db.connect(resolve_dsn(dsn, embedded)) as conn:
        if migrate.current(conn) is None:
            fail("this database has no pgqueue schema: run pgqueue migrate first")
        names = " and ".join(index.names)
        if drop:
            search_indexes.drop(conn, kind)
            click.echo(f"dropped {names}: the {index.filter} read 2,000 runs a page")
            return
        search_indexes.build(conn, kind)
        click.echo(f"{names} ready: the dashboard's {index.filter} read it")
