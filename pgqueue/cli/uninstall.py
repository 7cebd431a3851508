"""`pgqueue uninstall`: drop schema pgqueue and everything in it."""

from __future__ import annotations

import click

from pgqueue.cli._common import db_options, fail, resolve_dsn
from pgqueue.db import connect as db
from pgqueue.db import migrate
from pgqueue.db import sql as _sql


@click.command()
@db_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True, help="Drop the schema even while workers are live.")
def uninstall(dsn: str | None, embedded: bool, yes: bool, force: bool) -> None:
    """Drop schema pgqueue: every run, queue, schedule and worker record. Cannot be undone."""
    target = resolve_dsn(dsn, embedded)
    with db.connect(target) as conn:
        if migrate.current(conn) is None:
            click.echo("nothing to drop: this database has no pgqueue schema")
            return
        live = conn.execute(_sql.query("uninstall_live_workers")).fetchall()
        if live and not force:
            shown = ", ".join(f"{host} pid {pid}" for host, pid in live[:3])
            more = f" and {len(live) - 3} more" if len(live) > 3 else ""
            fail(
                f"{len(live)} worker{'s are' if len(live) > 1 else ' is'} live ({shown}{more}): "
                "stop them first, or pass --force"
            )
        row = conn.execute(_sql.query("uninstall_inventory")).fetchone()
        assert row is not None
        tables, views, functions, runs = row
        what = (
            f"schema pgqueue ({tables} tables, {views} views, {functions} functions, {runs} runs)"
        )
        where = f"{conn.info.dbname} on {conn.info.host}:{conn.info.port}"
        if not yes:
            click.confirm(f"Drop {what} in database {where}?", abort=True, err=True)
        conn.execute(_sql.query("uninstall"))
    click.echo(f"dropped {what}")
