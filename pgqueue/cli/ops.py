"""Operations on the whole installation: `pgqueue workers`, `prune`, `stats` and `demo`."""

from __future__ import annotations

import time

import click

from pgqueue.cli._common import db_options, echo_json, fail, json_option, open_app, recorded, table
from pgqueue.db import connect as db
from pgqueue.ops import retention


@click.command()
@db_options
@json_option
def workers(dsn: str | None, embedded: bool, as_json: bool) -> None:
    """Registered workers and their heartbeats."""
    rows = open_app(dsn, embedded).list_workers()
    if as_json:
        echo_json(rows)
    else:
        table(rows, ["id", "host", "pid", "queues", "concurrency", "running", "heartbeat_age"])


@click.command()
@click.option(
    "--dsn", envvar=db.DSN_ENV, default=None, help="Use this server instead of the embedded one."
)
@click.option(
    "--embedded", is_flag=True, help="Use the shared local embedded PostgreSQL (the default)."
)
@click.option("--runs", "count", default=200, show_default=True, type=click.IntRange(1, 100000))
def demo(dsn: str | None, embedded: bool, count: int) -> None:
    """Show pgqueue working: a batch of tasks through a real worker, then inspection."""
    from pgqueue import demo as demo_module

    if dsn and embedded:
        fail("give either --dsn or --embedded, not both")

    demo_module.run(dsn, count)


@click.command()
@db_options
@click.option(
    "--older-than", required=True, help="Finished before this long ago: 7d, 12h, 30m, 1d12h..."
)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.value for s in retention.FINISHED_STATES]),
    help="Only runs in this state (repeatable; default: every finished state).",
)
@click.option("--events", is_flag=True, help="Also delete events created before then.")
@click.option("--audit", is_flag=True, help="Also delete audit log entries recorded before then.")
@json_option
def prune(
    dsn: str | None,
    embedded: bool,
    older_than: str,
    states: tuple[str, ...],
    events: bool,
    audit: bool,
    as_json: bool,
) -> None:
    """Delete finished runs (with their steps and errors) older than --older-than."""
    age = retention.parse_duration(older_than)
    app = open_app(dsn, embedded)
    deleted = app.prune(age, states=states or retention.FINISHED_STATES, events=events, audit=audit)
    target = {
        "older_than": older_than,
        "states": list(states) or None,
        "events": events,
        "audit": audit,
    }
    recorded(app, "prune", target=target, count=sum(deleted.values()))
    if as_json:
        echo_json(deleted)
    else:
        click.echo("deleted " + ", ".join(f"{n} {what}" for what, n in deleted.items()))


@click.command()
@db_options
@click.option("--watch", is_flag=True, help="Redraw every --interval seconds until Ctrl-C.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(0.1))
@json_option
def stats(dsn: str | None, embedded: bool, watch: bool, interval: float, as_json: bool) -> None:
    """Queues, rates, latencies and live workers (pgqueue.queue_stats, workers_live)."""
    from pgqueue.ops import stats as stats_view

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
