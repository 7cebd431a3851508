"""The `pgqueue` command line run from a framework's own CLI (`manage.py pgqueue ...`,
`flask pgqueue ...`): the same click commands, with the framework's DSN and App as their
option defaults."""

from __future__ import annotations

from typing import Any

import click

from pgqueue import cli

# The App that the framework configured: `--app` points here, so the worker runs that very
# object (its DSN and connection provider already set) rather than importing another.
# (An App: `--app` loads it as any other, and checks that it is one.)
current_app: object = None
APP_SPEC = "pgqueue.contrib._cli:current_app"


def run(argv: list[str], *, app: object, dsn: str, prog_name: str) -> None:
    """Run `pgqueue ARGV`; returns on success, raises SystemExit(code) on failure."""
    global current_app
    current_app = app
    try:
        cli.main(argv, prog_name=prog_name, default_map=defaults(cli.cli, dsn=dsn))
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise


def defaults(command: click.Command, *, dsn: str) -> dict[str, Any]:
    """--dsn and --app defaults for every command (and subcommand) that takes them."""
    out: dict[str, Any] = {}
    names = {p.name for p in command.params}
    if "dsn" in names:
        out["dsn"] = dsn
    if "app_spec" in names:
        out["app_spec"] = APP_SPEC
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            out[name] = defaults(sub, dsn=dsn)
    return out
