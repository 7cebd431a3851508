"""The audit log of operators' actions (pgqueue.audit, migration 0024): who did what,
when, to which run or filter, how many runs it changed and why. The dashboard records
every action it takes (the Django user, "token" or "anonymous"); the CLI's `pgqueue runs
cancel|retry` record theirs as "cli"."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgqueue.db import sql as _sql

CLI = "cli"


def record(
    conn: psycopg.Connection[Any],
    actor: str,
    action: str,
    *,
    run_id: int | None = None,
    target: dict[str, Any] | None = None,
    count: int = 0,
    reason: str | None = None,
) -> None:
    """Add one action to pgqueue.audit."""
    conn.execute(
        _sql.query("audit_add"),
        {
            "actor": actor,
            "action": action,
            "run_id": run_id,
            "target": Jsonb(target or {}),
            "count": count,
            "reason": reason,
        },
    )
