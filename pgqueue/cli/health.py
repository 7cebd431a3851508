"""`pgqueue health`: is this installation able to do work? Exit 0 healthy, 1 not."""

from __future__ import annotations

import click

from pgqueue.cli._common import db_options, echo_json, json_option, resolve_dsn
from pgqueue.ops import health as health_module


@click.command()
@db_options
@json_option
@click.option(
    "--any-host",
    is_flag=True,
    help="Accept workers beating on any host (default: this host's, by its hostname).",
)
@click.option(
    "--max-age",
    type=click.FloatRange(1, 86400),
    default=health_module.MAX_HEARTBEAT_AGE,
    show_default=True,
    help="Seconds since a worker's last heartbeat for it to count as beating.",
)
def health(dsn: str | None, embedded: bool, as_json: bool, any_host: bool, max_age: float) -> int:
    """Check the database is reachable, the schema current and workers beating."""
    target = resolve_dsn(dsn, embedded)
    host = None if any_host else health_module.this_host()
    found = health_module.checks(target, host=host, max_age=max_age)
    healthy = all(c.ok for c in found)
    if as_json:
        echo_json({"healthy": healthy, "checks": [c.as_dict() for c in found]})
    else:
        for check in found:
            click.echo(check.line())
    return 0 if healthy else 1
