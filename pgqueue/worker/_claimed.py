"""A claimed run as the worker holds it: claim.sql's and claim_limited.sql's row."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from psycopg.rows import RowMaker


class Claimed(NamedTuple):
    """One row of claim.sql / claim_limited.sql: same columns, same order. A tuple, not a
    dict: a dict of 15 keys per claimed run cost the worker about 1 us of CPU per run."""

    id: int
    task: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    timeout_seconds: float | None
    lease_token: str  # text: the worker only hands it back
    priority: int
    group_key: str
    parent_id: int | None
    pickup_seconds: float
    has_steps: bool
    headers: dict[str, Any] | None  # W3C trace context of the enqueue (pgqueue.contrib.otel)


_make = functools.partial(tuple.__new__, Claimed)


def claimed_row(cursor: Any) -> RowMaker[Claimed]:
    """psycopg row factory for the claim statements (fails loudly if their columns and
    Claimed drift apart)."""
    names = tuple(c.name for c in cursor.description or ())
    if names and names != Claimed._fields:
        raise RuntimeError(f"claim returned columns {names}, expected {Claimed._fields}")
    return _make  # type: ignore[return-value]
