"""The enqueue engine's two pure halves, shared by App.insert_runs and its async twin:
the parameters of sql/enqueue.sql, and how its answer becomes RunHandles."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from pgqueue.runs import RunHandle
from pgqueue.tasks import RunRow

if TYPE_CHECKING:
    from pgqueue.app import App


def params(app: App, rows: Sequence[RunRow]) -> dict[str, Any]:
    """One array per column (the statement unnests them), plus the NOTIFY switch."""
    out: dict[str, Any] = {f.name: [getattr(r, f.name) for r in rows] for f in fields(RunRow)}
    out["notify"] = app.notify
    return out


def missing_keys(rows: Sequence[RunRow], found: Sequence[Sequence[Any]]) -> list[str]:
    """Idempotency keys the insert skipped because a run already holds them."""
    created = {key for _, key, _ in found if key is not None}
    return [
        r.idempotency_key for r in rows if r.idempotency_key and r.idempotency_key not in created
    ]


def handles(
    app: App,
    rows: Sequence[RunRow],
    found: Sequence[Sequence[Any]],
    existing: Sequence[Sequence[Any]],
) -> list[RunHandle]:
    """A handle per row, in order: `found` is the enqueue's (id, key, _) rows, `existing`
    the (id, key) of runs that already held a key (those handles say created=False)."""
    by_key = {key: run_id for run_id, key, _ in found if key is not None}
    by_key.update({key: run_id for run_id, key in existing})
    fresh = iter(run_id for run_id, key, _ in found if key is None)
    created_keys = {key for _, key, _ in found if key is not None}
    out = []
    for r in rows:
        if r.idempotency_key is None:
            out.append(RunHandle(next(fresh), app))
        else:
            created = r.idempotency_key in created_keys
            created_keys.discard(r.idempotency_key)
            out.append(RunHandle(by_key[r.idempotency_key], app, created=created))
    return out
