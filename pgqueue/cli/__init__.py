"""The `pgqueue` command line: the group, its commands (one module per command group) and
`main`. User errors print one line on stderr and exit 2."""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any

import click
import psycopg

from pgqueue.cli import (
    dashboard,
    enqueue,
    grants,
    health,
    migrate,
    ops,
    queues,
    runs,
    schedules,
    uninstall,
    worker,
)
from pgqueue.cli._common import load_app, open_app
from pgqueue.db import connect as db
from pgqueue.errors import PgQueueError, RunNotFound, UserError

__all__ = ["cli", "load_app", "main", "open_app"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pgqueue")
def cli() -> None:
    """pgqueue: durable background jobs and workflows in PostgreSQL."""


# One module per command group: a new group is one more module and one more line here.
cli.add_command(migrate.migrate_cmd)
cli.add_command(grants.grants_cmd)
cli.add_command(worker.worker)
cli.add_command(enqueue.enqueue)
cli.add_command(enqueue.emit)
cli.add_command(runs.runs)
cli.add_command(queues.queues)
cli.add_command(schedules.schedules)
cli.add_command(ops.workers)
cli.add_command(ops.prune)
cli.add_command(ops.stats)
cli.add_command(ops.demo)
cli.add_command(dashboard.dashboard)
cli.add_command(health.health)
cli.add_command(uninstall.uninstall)


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
