"""Retention: how long finished runs, events and audit entries are kept, and the pruning
itself.

Workers prune on their own (pgqueue/worker/maintenance/pruner.py) with the Retention they
are given; `pgqueue prune` and App.prune do it on demand. Deletes go in bounded batches, each
its own short statement, so pruning never holds many locks or a long transaction.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, LiteralString

import psycopg

from pgqueue.db import sql as _sql
from pgqueue.errors import UserError
from pgqueue.states import FINISHED_STATES as FINISHED_STATES  # the states pruned
from pgqueue.states import RunState

BATCH = 1000
EVENTS = "events"  # what prune_step deletes besides the runs of a finished state
AUDIT = "audit"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")


@dataclass(frozen=True)
class Retention:
    """How long finished runs (with their steps and errors), events and the audit log's
    entries (pgqueue.audit: operators' actions) are kept. None keeps them forever.
    `interval` is how often a worker prunes (seconds)."""

    succeeded: timedelta | None = timedelta(days=7)
    failed: timedelta | None = timedelta(days=30)
    canceled: timedelta | None = timedelta(days=30)
    events: timedelta | None = timedelta(days=30)
    interval: float = 60.0
    batch: int = BATCH
    # Longer than any run's: who cancelled or retried a run may be asked after the run has
    # gone (an entry keeps its run's id, not the run). Last: Retention's positional
    # fields before it keep their places.
    audit: timedelta | None = timedelta(days=90)

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError("Retention.batch must be >= 1")
        if self.interval <= 0:
            raise ValueError("Retention.interval must be > 0 seconds")

    def by_state(self) -> dict[str, timedelta]:
        kept = {
            RunState.SUCCEEDED: self.succeeded,
            RunState.FAILED: self.failed,
            RunState.CANCELED: self.canceled,
        }
        return {state: age for state, age in kept.items() if age is not None}

    def targets(self) -> list[tuple[str, timedelta]]:
        """What a worker's round prunes, in order: each finished state, then "events" and
        "audit", with its age; those kept forever are left out."""
        others = {EVENTS: self.events, AUDIT: self.audit}
        kept = [(what, age) for what, age in others.items() if age is not None]
        return list(self.by_state().items()) + kept


DEFAULT_RETENTION = Retention()


def parse_duration(text: str) -> timedelta:
    """'7d', '12h', '30m', '45s', '2w', '1d12h', or plain seconds."""
    value = text.strip().lower()
    try:
        return timedelta(seconds=float(value))
    except ValueError:
        pass
    parts = _DURATION.findall(value)
    if not parts or _DURATION.sub("", value).strip():
        raise UserError(
            f"invalid duration {text!r}: use a number with a unit, e.g. 7d, 12h, 30m, 45s, "
            "2w or 1d12h"
        )
    return timedelta(seconds=sum(float(n) * _UNITS[unit] for n, unit in parts))


def prune_step(
    target: str, older_than: timedelta, limit: int, *, tallied_only: bool = False
) -> tuple[LiteralString, Any]:
    """The statement and parameters of one batch: runs of the finished state `target`, or
    events (EVENTS), or audit entries (AUDIT). With `tallied_only` (the workers' pruner),
    runs the tally of finished runs has not counted yet are left for a later batch."""
    params = {
        "state": target,
        "older_than": older_than.total_seconds(),
        "limit": limit,
        "tallied_only": tallied_only,
    }
    # failed runs alone: runs_failed_idx holds them, every queue at once
    names: dict[str, LiteralString] = {
        EVENTS: "prune_events",
        AUDIT: "prune_audit",
        "failed": "prune_runs_failed",
    }
    name = names.get(target, "prune_runs")
    return _sql.query(name), params


# Runs whose finishing transaction began less than this long ago are left to a later
# fold of the tally: finished_at is the transaction's start, and it may not have
# committed yet (the workers' tally keeper and fold_tally() both use it).
TALLY_LAG_SECONDS = 10


def fold_tally(conn: psycopg.Connection[Any], rounds: int = 48) -> None:
    """Bring the tally of finished runs up to a few seconds ago (as a worker's tally
    keeper does) before a prune by hand, so that what it deletes was counted (all but
    the last few seconds' runs). Each round commits on its own: `conn` is in
    autocommit, as the App's connections are."""
    for _ in range(rounds):
        with conn.transaction():
            conn.execute(_sql.query("no_jit"))
            row = conn.execute(
                _sql.query("tally_finished"), {"lag_seconds": TALLY_LAG_SECONDS}
            ).fetchone()
        if row is None or not row[1]:
            return


def prune_batches_step(limit: int) -> tuple[LiteralString, Any]:
    """One batch of completed batches that nothing refers to any more (their members
    and callback run pruned): they go with the runs, whatever the retention."""
    return _sql.query("prune_batches"), {"limit": limit}


def prune(
    conn: psycopg.Connection[Any],
    older_than: timedelta,
    *,
    states: Iterable[str] = FINISHED_STATES,
    events: bool = False,
    audit: bool = False,
    batch: int = BATCH,
) -> dict[str, int]:
    """Delete runs in `states` that finished more than `older_than` ago (and events
    created before then, with events=True; audit entries recorded before then, with
    audit=True), in batches, then the completed batches (app.batch()) left without
    members or callback. Returns counts by state (and "events", "audit", "batches")."""
    deleted: dict[str, int] = {}
    targets: list[str] = []
    for state in states:
        if state not in FINISHED_STATES:
            raise UserError(
                f"cannot prune runs in state {state!r}: only finished runs "
                f"({', '.join(FINISHED_STATES)}) are pruned"
            )
        targets.append(state)
    runs = bool(targets)
    targets += [EVENTS] * events + [AUDIT] * audit
    fold_tally(conn)

    def until_short(step: tuple[LiteralString, Any]) -> int:
        """Run one batch statement until a batch comes back short: the rows deleted."""
        total = 0
        while True:
            with conn.transaction():  # no JIT, as the workers' pruner
                conn.execute(_sql.query("no_jit"))
                n = conn.execute(*step).rowcount
            total += n
            if n < batch:
                return total

    for target in targets:
        deleted[target] = until_short(prune_step(target, older_than, batch))
    if runs:
        deleted["batches"] = until_short(prune_batches_step(batch))
    return deleted
