"""`pgqueue grants`: the GRANT statements a role needs, printed or applied."""

from __future__ import annotations

import click

from pgqueue.cli._common import db_options, fail, resolve_dsn
from pgqueue.db import connect as db
from pgqueue.db import grants, migrate


@click.command("grants")
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
            if kind != "owner":
                setting = grants.search_path_setting(role).as_string(conn)
                click.echo(
                    "-- Through a pooler (--pooler session|transaction), which does not pass "
                    "pgqueue's search_path on,\n-- pin it on the role (as a superuser; "
                    f"docs/security.md):\n-- {setting};"
                )
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
