"""Every command group module's commands are on the `pgqueue` group, under their names."""

from __future__ import annotations

import click

from pgqueue.cli import cli

COMMANDS = {
    "migrate": set(),
    "grants": set(),
    "worker": set(),
    "enqueue": set(),
    "emit": set(),
    "runs": {"list", "show", "cancel", "retry", "search-index"},
    "queues": {"pause", "resume", "set", "groups", "purge"},
    "schedules": {"pause", "resume", "trigger"},
    "workers": set(),
    "prune": set(),
    "stats": set(),
    "demo": set(),
    "health": set(),
    "uninstall": set(),
}


def test_every_command_and_subcommand_is_registered() -> None:
    assert set(COMMANDS) <= set(cli.commands)
    for name, subcommands in COMMANDS.items():
        command = cli.commands[name]
        found = set(command.commands) if isinstance(command, click.Group) else set()
        assert found == subcommands, name
