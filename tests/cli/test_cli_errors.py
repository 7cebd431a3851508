"""Every CLI command, with a database it cannot use: one line on stderr, exit code 2, no
traceback and no password.

The commands come from the click group itself, so a new command is covered as soon as it
exists. They run in-process (the same main() as the console script): a subprocess per
case would cost a second each.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import click
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue.cli import cli, main
from tests.helpers import empty_database

SECRET = "s3cretpw"
# Arguments and required options, by parameter name: whatever a command needs to get as
# far as the database.
SAMPLES = {
    "role": "nobody",
    "task": "noop",
    "event": "ev",
    "run_id": "1",
    "queue": "q",
    "name": "sched",
}
REQUIRED_OPTIONS = {
    "app_spec": ["--app", "tests.apps.basic:app"],
    "older_than": ["--older-than", "7d"],
    "kind": ["--as", "reader"],
}
# Commands that create the schema themselves: an unmigrated database is what they fix.
MIGRATING = {("migrate",), ("demo",)}
# `pgqueue health` reports an unreachable database or a missing schema as a failed check
# (exit 1, tests/cli/test_production_cli.py); `pgqueue uninstall` of no schema has nothing
# to drop.
PROBES = {("health",)}
WITHOUT_SCHEMA = {("uninstall",)}


def commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            if command.invoke_without_command:
                yield (*path, name)
            yield from commands(command, (*path, name))
        else:
            yield (*path, name)


def argv(path: tuple[str, ...], dsn: str) -> list[str]:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    out = list(path)
    for param in command.params:
        if isinstance(param, click.Argument):
            out.append(SAMPLES[str(param.name)])
        elif param.required:
            out += REQUIRED_OPTIONS[str(param.name)]
    return [*out, "--dsn", dsn]


def run(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    _, err = capsys.readouterr()
    return (exc.value.code if isinstance(exc.value.code, int) else 1), err


def check_all(
    capsys: pytest.CaptureFixture[str],
    dsn: str,
    expect: str,
    skip: set[tuple[str, ...]] = frozenset(),  # type: ignore[assignment]
) -> None:
    wrong = []
    for path in commands():
        if path in skip:
            continue
        code, err = run(capsys, argv(path, dsn))
        ok = (
            code == 2
            and err.startswith("error: ")
            and err.count("\n") == 1
            and "Traceback" not in err
            and SECRET not in err
            and expect in err
        )
        if not ok:
            wrong.append(f"{' '.join(path)}: rc={code} {err!r}")
    assert not wrong, "\n".join(wrong)


def test_the_matrix_covers_every_command() -> None:
    found = set(commands())
    assert {("grants",), ("worker",), ("runs", "cancel"), ("queues",), ("prune",)} <= found
    assert len(found) >= 20


BAD_DSNS = [
    f"postgresql://u:{SECRET}@[::1",  # libpq's message quotes the whole URI
    f"postgresql://u:{SECRET}@127.0.0.1:1/x?connect_timeout=2",
    f"host=127.0.0.1 port=1 password={SECRET} connect_timeout=2",
    f"host=127.0.0.1 port=1 password='{SECRET}' connect_timeout=2 sslmode=bogus",
    f"postgresql://u@127.0.0.1:1/x?password={SECRET}&connect_timeout=2",
    f"postgresql://u:{SECRET}@127.0.0.1:1/x?connect_timeout=2&port=abc",
    "postgresql://u:s3cret%70w@127.0.0.1:1/x?connect_timeout=2",  # percent-encoded
]


def test_a_bad_dsn_is_one_line_without_the_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    for bad_dsn in BAD_DSNS:
        check_all(capsys, bad_dsn, expect="", skip=PROBES)


@pytest.fixture
def unmigrated(server_params: dict[str, Any]) -> Iterator[str]:
    with empty_database(server_params, "pgqueue_unmigrated") as dsn:
        yield dsn


def test_an_unmigrated_database_says_to_migrate(
    capsys: pytest.CaptureFixture[str], unmigrated: str
) -> None:
    check_all(
        capsys, unmigrated, expect="pgqueue migrate", skip=MIGRATING | PROBES | WITHOUT_SCHEMA
    )


@pytest.fixture
def role_without_grants(dsn: str) -> Iterator[str]:
    """A role that can connect to the migrated test database and has no grant at all."""
    role = f"pgqueue_nogrants_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    params = conninfo_to_dict(dsn) | {"user": role}
    try:
        yield make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_role_without_grants_is_told_which_command_grants_them(
    capsys: pytest.CaptureFixture[str], role_without_grants: str
) -> None:
    check_all(capsys, role_without_grants, expect="pgqueue grants")


def test_out_of_range_values_are_one_line(capsys: pytest.CaptureFixture[str], dsn: str) -> None:
    too_big = str(2**63)
    for args in (
        ["runs", "show", too_big],
        ["runs", "cancel", too_big],
        ["runs", "retry", too_big],
        ["queues", "set", "q", "--concurrency", str(2**40)],
        ["queues", "set", "q", "--group-concurrency", str(2**31)],
        ["emit", "ev", "--delay", "nan"],
        ["emit", "ev", "--delay", "1e308"],
        ["runs", "list", "--limit", "0"],
    ):
        code, err = run(capsys, [*args, "--dsn", dsn])
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (args, err)
        assert "Traceback" not in err
