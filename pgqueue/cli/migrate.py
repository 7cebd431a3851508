"""`pgqueue migrate`: create or update the schema, or print its SQL."""

from __future__ import annotations

import click

from pgqueue import db, migrate
from pgqueue.cli._common import db_options, resolve_dsn


@click.command("migrate")
@db_options
@click.option("--sql", "print_sql", is_flag=True, help="Print the SQL instead of running it.")
@click.option(
    "--lock-timeout",
    type=float,
    default=migrate.LOCK_TIMEOUT,
    show_default=True,
    help="Seconds to wait for another migration (the migration lock) before giving up.",
)
def migrate_cmd(dsn: str | None, embedded: bool, print_sql: bool, lock_timeout: float) -> None:
    """Create or update the pgqueue schema (idempotent)."""
    if print_sql:
        click.echo(migrate.upgrade_sql())
        return
    target = resolve_dsn(dsn, embedded)
    db.connect(target).close()
    migrate.upgrade(target, lock_timeout=lock_timeout)
    click.echo(f"pgqueue schema is at revision {migrate.head()}")
