"""`pgqueue queues`: per-queue counts, pause and resume, limits, the busiest groups."""

from __future__ import annotations

from typing import Any

import click

from pgqueue.cli import _bulk
from pgqueue.cli._common import db_options, echo_json, json_option, open_app, recorded, table
from pgqueue.errors import UserError
from pgqueue.ops.bulk import DEFAULT_BATCH, purge_filter
from pgqueue.tasks.rates import KEEP, Keep

# The table fits a terminal of 120 columns; --json has every field by its own name.
QUEUE_COLUMNS = [
    "queue",
    "queued",
    "scheduled",
    "running",
    "waiting",
    "ok/h",
    "failed/h",
    "canceled/h",
    "oldest",
    "limits",
]


def queue_line(row: dict[str, Any]) -> dict[str, Any]:
    """A queue_summary row as the table shows it: the last hour's outcomes under short
    names, the oldest queued run's age, and the limits in one column."""
    oldest = row["oldest_queued_seconds"]
    return row | {
        "ok/h": row["succeeded_last_hour"],
        "failed/h": row["failed_last_hour"],
        "canceled/h": row["canceled_last_hour"],
        "oldest": None if oldest is None else f"{oldest:.0f}s",
        "limits": limits(row),
    }


def limits(row: dict[str, Any]) -> str:
    """What holds a queue's runs back, in short: "paused, max 3, 1/group, 100/m (7 used),
    5/s/group, ordered"; "-" when nothing does."""
    parts = ["paused"] if row["paused"] else []
    if row["concurrency"] is not None:
        parts.append(f"max {row['concurrency']}")
    if row["group_concurrency"] is not None:
        parts.append(f"{row['group_concurrency']}/group")
    if row["rate_limit"]:
        parts.append(f"{row['rate_limit']} ({row['rate_used'] or 0} used)")
    if row["group_rate_limit"]:
        parts.append(f"{row['group_rate_limit']}/group")
    if row["ordered"]:
        parts.append("ordered")
    if row.get("group_weights"):
        parts.append(weights_text(row["group_weights"], row["default_group_weight"]))
    return ", ".join(parts) or "-"


def weights_text(weights: dict[str, int], default: int) -> str:
    """Group weights in short: "weights gold=3 silver=2 *=1" (*: every other group)."""
    named = " ".join(f"{g}={w}" for g, w in sorted(weights.items()))
    return f"weights {named} *={default}"


def _weight_pair(value: str) -> tuple[str, int]:
    """--group-weight GROUP=N as (group, weight); a clear usage error otherwise (the
    range is checked with the queue's limits, by App.set_group_weights)."""
    group, sep, weight = value.rpartition("=")
    if not sep or not group or not weight.strip().lstrip("-").isdigit():
        raise click.BadParameter(
            f"{value!r} is not GROUP=N (a group name and a whole number, e.g. gold=3)",
            param_hint="--group-weight",
        )
    return group, int(weight)


@click.group(invoke_without_command=True)
@db_options
@json_option
@click.pass_context
def queues(ctx: click.Context, dsn: str | None, embedded: bool, as_json: bool) -> None:
    """Per-queue counts (or: pause / resume a queue)."""
    if ctx.invoked_subcommand is not None:
        return
    app = open_app(dsn, embedded)
    summary = app.queue_summary()
    if as_json:
        echo_json(summary)
        return
    table([queue_line(row) for row in summary], QUEUE_COLUMNS)
    busiest = [g for g in app.groups(limit=5) if g["group_key"]]
    if busiest:
        click.echo("\nbusiest groups:")
        table(busiest, ["queue", "group_key", "running", "queued", "deferred", "rate_used"])


def _pause_command(name: str, paused: bool) -> None:
    @queues.command(name)
    @db_options
    @click.argument("queue")
    def command(dsn: str | None, embedded: bool, queue: str) -> None:
        app = open_app(dsn, embedded)
        app.set_paused(queue, paused)
        recorded(app, name, target={"queue": queue})
        click.echo(f"queue {queue} {'paused' if paused else 'resumed'}")

    command.__doc__ = (
        "Stop workers claiming from QUEUE (running runs finish)."
        if paused
        else "Let workers claim from QUEUE again."
    )


_pause_command("pause", True)


@queues.command("resume")
@db_options
@click.argument("queue")
@click.option(
    "--group",
    metavar="KEY",
    help="Lift only the backoff of group KEY (RetryAfter(scope='group')); the queue's "
    "pause and other backoffs stay.",
)
def queues_resume(dsn: str | None, embedded: bool, queue: str, group: str | None) -> None:
    """Let workers claim from QUEUE again: lifts its pause and its backoffs (those of
    RetryAfter(scope='queue') and of every group, scope='group')."""
    app = open_app(dsn, embedded)
    if group is not None:
        lifted = app.lift_group_backoff(queue, group)
        recorded(app, "resume", target={"queue": queue, "group": group})
        if lifted:
            click.echo(f"group {group} of queue {queue}: backoff lifted")
        else:
            click.echo(f"group {group} of queue {queue} was not backed off")
        return
    app.set_paused(queue, False)
    recorded(app, "resume", target={"queue": queue})
    click.echo(f"queue {queue} resumed")


@queues.command("purge")
@db_options
@click.argument("queue")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def queues_purge(dsn: str | None, embedded: bool, queue: str, yes: bool) -> None:
    """Cancel every run of QUEUE that has not started (queued and scheduled); running and
    waiting runs go on. Prints how many and asks first (--yes: don't ask)."""
    app = open_app(dsn, embedded)
    _bulk.run(app.database, "cancel", purge_filter(queue), yes=yes, batch_size=DEFAULT_BATCH)


@queues.command("set")
@db_options
@click.argument("queue")
@click.option(
    "--concurrency",
    type=click.IntRange(0, 2**31 - 1),
    help="Max running runs of QUEUE across all workers (0: no limit).",
)
@click.option(
    "--group-concurrency",
    type=click.IntRange(0, 2**31 - 1),
    help="Max running runs per group in QUEUE (0: no limit).",
)
@click.option(
    "--rate-limit",
    metavar="N/s|N/m|N/h",
    help="Max starts of QUEUE in any second, minute or hour, across all workers (0: none).",
)
@click.option(
    "--group-rate-limit",
    metavar="N/s|N/m|N/h",
    help="Max starts per group of QUEUE in any second, minute or hour (0: none).",
)
@click.option(
    "--ordered/--unordered",
    default=None,
    help="Start each group's runs one after another in id order (needs group concurrency 1).",
)
@click.option(
    "--group-weight",
    "group_weight",
    multiple=True,
    metavar="GROUP=N",
    help="Weight of GROUP (1 to 1000): while groups wait, their starts follow the weights "
    "(repeatable).",
)
@click.option(
    "--default-group-weight",
    type=int,
    metavar="N",
    help="Weight of the groups no --group-weight names (1 to 1000; default 1).",
)
@click.option(
    "--clear-group-weight",
    multiple=True,
    metavar="GROUP",
    help="Forget GROUP's weight: it gets the default weight (repeatable).",
)
@click.option(
    "--no-group-weights",
    is_flag=True,
    help="Forget every group weight: groups take plain turns again.",
)
@click.option(
    "--priority-aging",
    metavar="SECONDS",
    help="Move a waiting run's priority one step up every SECONDS it waits (0 or none: no "
    "aging; waiting runs get their own priority back).",
)
def queues_set(
    dsn: str | None,
    embedded: bool,
    queue: str,
    concurrency: int | None,
    group_concurrency: int | None,
    rate_limit: str | None,
    group_rate_limit: str | None,
    ordered: bool | None,
    group_weight: tuple[str, ...],
    default_group_weight: int | None,
    clear_group_weight: tuple[str, ...],
    no_group_weights: bool,
    priority_aging: str | None,
) -> None:
    """Change QUEUE's cluster-wide limits now (workers apply them to their next claim).
    Limits not given keep their values."""
    pairs = [_weight_pair(v) for v in group_weight]
    weighing = bool(pairs or clear_group_weight or no_group_weights)
    weighing = weighing or default_group_weight is not None
    app = open_app(dsn, embedded)
    aging = _aging_option(priority_aging)
    current = {q["queue"]: q for q in app.queue_summary()}.get(queue, {})
    new_c = current.get("concurrency") if concurrency is None else (concurrency or None)
    new_g = (
        current.get("group_concurrency")
        if group_concurrency is None
        else (group_concurrency or None)
    )
    weights: dict[str, int] | None = None
    if weighing:
        stored = app.group_weights(queue) or {"group_weights": {}}
        weights = {} if no_group_weights else dict(stored["group_weights"])
        for group in clear_group_weight:
            weights.pop(group, None)
        weights.update(pairs)
    # Weights removed go first (the limits they shared may go with them); weights set go
    # last (they need the limits they share).
    default = KEEP if default_group_weight is None else default_group_weight
    if weights == {}:
        app.set_group_weights(queue, weights, default_group_weight=default)
    app.set_limits(
        queue,
        concurrency=new_c,
        group_concurrency=new_g,
        rate_limit=_rate_option(rate_limit),
        group_rate_limit=_rate_option(group_rate_limit),
        ordered=KEEP if ordered is None else ordered,
    )
    if weights:
        app.set_group_weights(queue, weights, default_group_weight=default)
    if not isinstance(aging, Keep):
        app.set_priority_aging(queue, aging)
    now = {q["queue"]: q for q in app.queue_summary()}[queue]
    given = {
        "concurrency": concurrency,
        "group_concurrency": group_concurrency,
        "rate_limit": rate_limit,
        "group_rate_limit": group_rate_limit,
        "ordered": ordered,
        "group_weight": list(group_weight) or None,
        "default_group_weight": default_group_weight,
        "clear_group_weight": list(clear_group_weight) or None,
        "no_group_weights": no_group_weights or None,
        "priority_aging": priority_aging,
    }
    recorded(
        app, "limits", target={"queue": queue} | {k: v for k, v in given.items() if v is not None}
    )
    click.echo(
        f"queue {queue}: concurrency {new_c or 'unlimited'}, "
        f"group_concurrency {new_g or 'unlimited'}, "
        f"rate_limit {now['rate_limit'] or 'none'}, "
        f"group_rate_limit {now['group_rate_limit'] or 'none'}"
        + (", ordered" if now["ordered"] else "")
        + (
            ", " + weights_text(now["group_weights"], now["default_group_weight"])
            if now["group_weights"]
            else ""
        )
        + ("" if aging is None or isinstance(aging, Keep) else f", priority_aging {aging:g}s")
    )


def _aging_option(value: str | None) -> float | Keep | None:
    """--priority-aging's value: not given keeps the stored one, 0 or none removes it."""
    if value is None:
        return KEEP
    if value.strip().lower() in ("0", "none"):
        return None
    try:
        return float(value)
    except ValueError:
        raise UserError(
            f"--priority-aging must be seconds per step (a number, 0 or none), not {value!r}"
        ) from None


def _rate_option(value: str | None) -> str | Keep | None:
    """--rate-limit's value for App.set_limits: not given keeps the stored one, 0 or none
    removes it."""
    if value is None:
        return KEEP
    return None if value.strip().lower() in ("0", "none") else value


@queues.command("groups")
@db_options
@click.option("--queue")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000))
@json_option
def queues_groups(
    dsn: str | None, embedded: bool, queue: str | None, limit: int, as_json: bool
) -> None:
    """The busiest groups: running (valid leases) and queued counts."""
    rows = open_app(dsn, embedded).groups(queue, limit)
    if as_json:
        echo_json(rows)
    else:
        table(
            rows,
            ["queue", "group_key", "running", "queued", "deferred", "rate_used", "last_started_at"],
        )
