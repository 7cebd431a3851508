"""The bulk forms of `pgqueue runs cancel|retry` and `pgqueue queues purge`: count what the
filter reaches, say it, ask (unless --yes), then act in batches (pgqueue.ops.bulk)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pgqueue.cli._common import fail
from pgqueue.ops import audit as _audit
from pgqueue.ops import bulk as _bulk
from pgqueue.ops import retention
from pgqueue.states import STATES

if TYPE_CHECKING:
    from pgqueue.db.database import Database

F = TypeVar("F", bound=Callable[..., Any])


def filter_options(fn: F) -> F:
    """The filters of a bulk cancel or retry, and --yes and --batch-size."""
    for option in reversed(
        [
            click.option(
                "--state",
                "states",
                multiple=True,
                type=click.Choice([s.value for s in STATES]),
                help="Only runs in this state (repeatable).",
            ),
            click.option("--queue", help="Only runs of this queue."),
            click.option("--task", help="Only runs of this task."),
            click.option("--group", help="Only runs of this group."),
            click.option(
                "--older-than", help="Only runs created before this long ago: 7d, 12h, 30m..."
            ),
            click.option("--all", "all_runs", is_flag=True, help="Every run (no filter)."),
            click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation."),
            click.option(
                "--batch-size",
                default=_bulk.DEFAULT_BATCH,
                show_default=True,
                type=click.IntRange(1, _bulk.MAX_BATCH),
                help="Runs per transaction.",
            ),
        ]
    ):
        fn = option(fn)
    return fn


def build_filter(
    states: tuple[str, ...],
    queue: str | None,
    task: str | None,
    group: str | None,
    older_than: str | None,
    all_runs: bool,
) -> _bulk.Filter:
    age = retention.parse_duration(older_than) if older_than is not None else None
    filt = _bulk.Filter.of(
        state=states, queue=queue, task=task, group=group, older_than=age, all_runs=all_runs
    )
    if not filt.narrows and not all_runs:
        fail(
            "give a run id, or filters (--state, --queue, --task, --group, --older-than), "
            "or --all to act on every run"
        )
    return filt


def run(
    database: Database,
    action: str,
    filt: _bulk.Filter,
    *,
    yes: bool,
    batch_size: int,
    reason: str | None = None,
) -> None:
    """Count, confirm, act, report."""
    verb = action
    with database.connection() as conn:
        found = _bulk.count(conn, action, filt)
    what = ", ".join(f"{k}={v}" for k, v in filt.to_json().items()) or "all runs"
    if found == 0:
        click.echo(f"no runs to {verb} ({what})")
        return
    if not yes:
        try:
            agreed = click.confirm(f"{verb} {found} runs ({what})?", default=False, err=True)
        except click.Abort:  # end of input: nobody to answer
            click.echo("", err=True)  # end the question's line
            fail(f"{found} runs match and no answer came; pass --yes to {verb} them")
        if not agreed:
            click.echo("nothing changed", err=True)
            sys.exit(1)
    with database.connection() as conn:
        changed = _bulk.act(conn, action, filt, batch_size=batch_size, reason=reason)
        _audit.record(
            conn, _audit.CLI, f"bulk_{action}", target=filt.to_json(), count=changed, reason=reason
        )
    done = "canceled" if action == "cancel" else "queued again"
    click.echo(f"{changed} runs {done}")
