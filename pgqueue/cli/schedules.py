"""`pgqueue schedules`: list cron schedules, pause, resume or trigger one."""

from __future__ import annotations

import click

from pgqueue.cli._common import db_options, echo_json, json_option, open_app, recorded, table

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


@click.group(invoke_without_command=True)
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
    app = open_app(dsn, embedded)
    app.pause_schedule(name)
    recorded(app, "schedule_pause", target={"schedule": name})
    click.echo(f"schedule {name} paused")


@schedules.command("resume")
@db_options
@click.argument("name")
def schedules_resume(dsn: str | None, embedded: bool, name: str) -> None:
    """Let NAME fire again, from its next tick (ticks missed while paused are skipped)."""
    app = open_app(dsn, embedded)
    app.resume_schedule(name)
    recorded(app, "schedule_resume", target={"schedule": name})
    click.echo(f"schedule {name} resumed")


@schedules.command("trigger")
@db_options
@click.argument("name")
@json_option
def schedules_trigger(dsn: str | None, embedded: bool, name: str, as_json: bool) -> None:
    """Enqueue one run of NAME now, outside its cron."""
    app = open_app(dsn, embedded)
    handle = app.trigger_schedule(name)
    recorded(app, "schedule_trigger", run_id=handle.id, target={"schedule": name})
    if as_json:
        echo_json({"id": handle.id})
    else:
        click.echo(f"run {handle.id} enqueued")
