"""`pgqueue migrate`: create or update the schema, check whether it is current, or print
its SQL."""

from __future__ import annotations

import click

from pgqueue.cli._common import db_options, fail, resolve_dsn
from pgqueue.db import connect as db
from pgqueue.db import migrate


@click.command("migrate")
@db_options
@click.option(
    "--sql", "print_sql", is_flag=True, help="Print the SQL that creates the whole schema."
)
@click.option(
    "--check",
    is_flag=True,
    help="Run nothing: exit 0 when the schema is current, 1 when migrations are pending.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Run nothing: print the SQL of the migrations this database still needs.",
)
@click.option(
    "--lock-timeout",
    type=float,
    default=migrate.LOCK_TIMEOUT,
    show_default=True,
    help="Seconds to wait for another migration (the migration lock) before giving up.",
)
@click.option(
    "--ddl-lock-timeout",
    type=float,
    default=migrate.DDL_LOCK_TIMEOUT,
    show_default=True,
    help="Seconds a migration's statement waits for a table's lock (claims and enqueues"
    " wait behind it) before its revision is tried again.",
)
@click.option(
    "--ddl-attempts",
    type=click.IntRange(1, 100),
    default=migrate.DDL_ATTEMPTS,
    show_default=True,
    help="Times a revision is tried before giving up.",
)
def migrate_cmd(
    dsn: str | None,
    embedded: bool,
    print_sql: bool,
    check: bool,
    dry_run: bool,
    lock_timeout: float,
    ddl_lock_timeout: float,
    ddl_attempts: int,
) -> int | None:
    """Create or update the pgqueue schema (idempotent)."""
    if sum((print_sql, check, dry_run)) > 1:
        fail("give at most one of --sql, --check and --dry-run")
    if print_sql:
        click.echo(migrate.upgrade_sql())
        return None
    target = resolve_dsn(dsn, embedded)
    if check or dry_run:
        with db.connect(target) as conn:
            found = migrate.current(conn)
        pending = migrate.pending(found)
        if check:
            click.echo(migrate.describe(found, pending))
            return 1 if pending else 0
        if pending:
            click.echo(migrate.upgrade_sql(found))
        else:
            click.echo(f"-- nothing to run: {migrate.describe(found, pending)}")
        return None
    db.connect(target).close()
    migrate.upgrade(
        target,
        lock_timeout=lock_timeout,
        ddl_lock_timeout=ddl_lock_timeout,
        ddl_attempts=ddl_attempts,
    )
    click.echo(f"pgqueue schema is at revision {migrate.head()}")
    return None
