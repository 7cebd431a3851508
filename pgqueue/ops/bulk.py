"""Bulk operator actions: cancel or retry every run that matches a filter, in batches.

One implementation behind `app.cancel_where()` / `app.retry_where()` / `app.purge_queue()`,
`pgqueue runs cancel|retry` with filters, `pgqueue queues purge` and the dashboard's bulk
form. Each batch is one statement (sql/bulk_cancel.sql, sql/bulk_retry.sql) run in
autocommit, so a million matching runs never sit in one long transaction: the action walks
the matching runs at most `batch_size` per transaction (see the two statements for how
each finds the next batch on its partial index), and every
run goes through pgqueue.cancel() or pgqueue.retry(), the same functions as the one-run
commands. Only runs that existed when the action started are reached (`upto`): runs
enqueued (or, for a retry, finished) while it works are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from pgqueue.db import sql as _sql
from pgqueue.enqueue.checks import MAX_REASON_BYTES, check_key
from pgqueue.errors import OutOfRange, UserError
from pgqueue.states import FINISHED_STATES, LIVE_STATES, STATES

ACTIONS = ("cancel", "retry")
DEFAULT_BATCH = 1000
MAX_BATCH = 10000
# A batch that meets a deadlock (a completer writing the same runs in another order) is
# rolled back whole; it is tried again this many times before the error goes up.
BATCH_TRIES = 3


class BulkError(UserError, ValueError):
    """A bulk action that cannot be done as asked (bad action, state or filter)."""


@dataclass(frozen=True)
class Filter:
    """Which runs a bulk action reaches. Every field narrows it; no field at all means
    every run, which a caller must ask for with `all_runs=True`."""

    states: tuple[str, ...] = ()
    queue: str | None = None
    task: str | None = None
    group: str | None = None
    older_than: timedelta | None = None
    all_runs: bool = field(default=False, compare=False)
    # the error's class: its first line up to the first colon (`ValueError`), as the
    # dashboard's Failures page groups failed runs
    error_class: str | None = None

    @classmethod
    def of(
        cls,
        *,
        state: str | Sequence[str] | None = None,
        queue: str | None = None,
        task: str | None = None,
        group: str | None = None,
        older_than: timedelta | float | None = None,
        all_runs: bool = False,
        error_class: str | None = None,
    ) -> Filter:
        states = (state,) if isinstance(state, str) else tuple(state or ())
        for s in states:
            if s not in STATES:
                raise BulkError(f"unknown state {s!r}: one of {', '.join(STATES)}")
        named = (("queue", queue), ("task", task), ("group", group), ("error_class", error_class))
        for name, value in named:
            if value is not None and (
                not isinstance(value, str) or "\x00" in value or len(value) > 512
            ):
                raise BulkError(f"filter {name} must be a name (no NUL, at most 512 characters)")
        age = older_than
        if age is not None and not isinstance(age, timedelta):
            age = timedelta(seconds=age)
        if age is not None and age < timedelta(0):
            raise OutOfRange(f"older_than must not be negative, not {age}")
        return cls(tuple(dict.fromkeys(states)), queue, task, group, age, all_runs, error_class)

    @property
    def narrows(self) -> bool:
        return bool(self.states) or any(
            v is not None
            for v in (self.queue, self.task, self.group, self.older_than, self.error_class)
        )

    def check_scope(self) -> None:
        if not self.narrows and not self.all_runs:
            raise BulkError(
                "no filter given: pass a state, queue, task, group or older-than filter, "
                "or all_runs=True (--all) to act on every run"
            )

    def states_for(self, action: str) -> tuple[str, ...]:
        """The states `action` reaches: those it can change, narrowed by the filter."""
        if action == "cancel":
            allowed: tuple[str, ...] = tuple(s.value for s in LIVE_STATES)
        elif action == "retry":
            allowed = tuple(s.value for s in FINISHED_STATES)
        else:
            raise BulkError(f"unknown bulk action {action!r}: cancel or retry")
        if not self.states:
            return allowed
        refused = [s for s in self.states if s not in allowed]
        if refused:
            raise BulkError(
                f"cannot {action} runs that are {', '.join(refused)}: "
                f"{action} reaches only {', '.join(allowed)} runs"
            )
        return self.states

    def params(self) -> dict[str, Any]:
        """The statements' filter parameters; the age is compared with the database's
        clock (now()), not this machine's."""
        age = None if self.older_than is None else self.older_than.total_seconds()
        return {
            "queue": self.queue,
            "task": self.task,
            "group": self.group,
            "older_than": age,
            "error_class": self.error_class,
            "reason": None,  # a cancel's cancel_reason (act() sets it)
        }

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.states:
            out["state"] = list(self.states)
        for key in ("queue", "task", "group", "error_class"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.older_than is not None:
            out["older_than_seconds"] = self.older_than.total_seconds()
        return out


# The order each live state's partial index gives (runs_wait_deadline_idx,
# runs_scheduled_idx, runs_claim_idx, runs_lease_idx), for bulk_cancel.sql. Waiting runs
# go first: a canceled child wakes its waiting parent (to queued), and a parent that
# matches the filter is then canceled already.
CANCEL_ORDER: dict[str, LiteralString] = {
    "waiting": "r.queue, r.run_at",
    "scheduled": "r.queue, r.run_at",
    "queued": "r.queue, r.priority, r.id",
    "running": "r.queue, r.lease_expires_at",
}


def with_states(
    name: LiteralString, states: tuple[str, ...], batch: int | None = None
) -> sql.Composed:
    """sql/<name>.sql with its {states} (and {batch}) filled in as literals: a partial
    index applies only when the planner sees the state, which a parameter would hide from
    a generic plan; a LIMIT it cannot see, it guesses at a tenth of the rows."""
    assert states and all(s in STATES for s in states)
    literals = sql.SQL(", ").join(sql.Literal(s) for s in states)
    extra = {} if batch is None else {"batch": sql.Literal(int(batch))}
    return sql.SQL(_sql.query(name)).format(states=literals, **extra)


def retry_query(states: tuple[str, ...], batch: int) -> sql.Composed:
    """bulk_retry.sql for finished `states` (runs_finished_queue_idx, queue by queue), or
    bulk_retry_failed.sql for failed runs alone (runs_failed_idx holds them alone)."""
    name: LiteralString = "bulk_retry_failed" if states == ("failed",) else "bulk_retry"
    return with_states(name, states, batch)


def cancel_query(state: str, batch: int) -> sql.Composed:
    """bulk_cancel.sql for one live state, read in its partial index's order."""
    return sql.SQL(_sql.query("bulk_cancel")).format(
        state=sql.Literal(state), order=sql.SQL(CANCEL_ORDER[state]), batch=sql.Literal(batch)
    )


def count(conn: psycopg.Connection[Any], action: str, filt: Filter) -> int:
    """How many runs `action` with this filter would reach now."""
    filt.check_scope()
    query = with_states("bulk_count", filt.states_for(action))
    with conn.transaction():
        conn.execute(_sql.query("no_jit"))
        row = conn.execute(query, filt.params()).fetchone()
    return int(row[0]) if row else 0


def act(
    conn: psycopg.Connection[Any],
    action: str,
    filt: Filter,
    *,
    batch_size: int = DEFAULT_BATCH,
    reason: str | None = None,
) -> int:
    """Cancel or retry every matching run that exists now, `batch_size` per transaction;
    how many changed. `conn` must be in autocommit (each batch commits on its own). A
    cancel stores `reason` in each run's cancel_reason."""
    filt.check_scope()
    if not 1 <= batch_size <= MAX_BATCH:
        raise OutOfRange(f"batch_size must be between 1 and {MAX_BATCH}, not {batch_size}")
    if not conn.autocommit:
        raise BulkError("a bulk action commits batch by batch: give it an autocommit connection")
    states = filt.states_for(action)
    row = conn.execute(_sql.query("last_run_id")).fetchone()
    assert row is not None
    params = filt.params() | {"upto": row[0], "upto_at": row[1]}
    if action == "cancel":
        params["reason"] = check_key("cancel reason", reason, limit=MAX_REASON_BYTES)
        return sum(
            _cancel_batches(conn, cancel_query(state, batch_size), params)
            for state in CANCEL_ORDER
            if state in states
        )
    query = retry_query(states, batch_size)
    return _retry_batches(conn, query, params | {"after_at": EPOCH, "after_id": 0})


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _cancel_batches(
    conn: psycopg.Connection[Any], query: sql.Composed, params: dict[str, Any]
) -> int:
    """Canceled runs leave the states the batch reads: batch until one finds nothing."""
    changed = 0
    while True:
        reached, done = _batch(conn, query, params)
        if not reached:
            return changed
        changed += done


def _retry_batches(
    conn: psycopg.Connection[Any], query: sql.Composed, params: dict[str, Any]
) -> int:
    """Retried runs keep their finished_at until retry() clears it: walk the keyset."""
    changed = 0
    while True:
        last_at, last_id, done = _batch(conn, query, params)
        if last_id is None:
            return changed
        changed += done
        params["after_at"], params["after_id"] = last_at, last_id


def _batch(conn: psycopg.Connection[Any], query: sql.Composed, params: dict[str, Any]) -> Any:
    """One batch's row, tried again if it met a deadlock (and was rolled back whole)."""
    for tries_left in range(BATCH_TRIES - 1, -1, -1):
        try:
            with conn.transaction():  # a batch commits on its own, without JIT
                conn.execute(_sql.query("no_jit"))
                row = conn.execute(query, params).fetchone()
        except pg_errors.DeadlockDetected:
            if not tries_left:
                raise
            continue
        assert row is not None
        return row
    raise AssertionError("unreachable")


def purge_filter(queue: str) -> Filter:
    """`pgqueue queues purge Q`: the queue's runs that have not started (queued and
    scheduled). Running and waiting runs are left to finish; cancel them by state."""
    return Filter.of(queue=queue, state=("scheduled", "queued"))
