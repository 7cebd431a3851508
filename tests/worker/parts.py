"""Helpers for testing a worker's parts alone, against a real database, without a Worker."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgqueue.db import sql as _sql
from pgqueue.worker._claimed import claimed_row
from pgqueue.worker.records import Claimed
from pgqueue.worker.semaphores import ClaimMarks

WORKER_ID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
# claim.sql's start parameters for a claim from the front, as a worker's first claim
FROM_FRONT = ClaimMarks().start("default")


def claim(dsn: str, limit: int, queue: str = "default", lease_seconds: float = 30) -> list[Claimed]:
    """One claim, as the producer makes it, for WORKER_ID: the runs are `running` after it."""
    params = {
        "queue": queue,
        "limit": limit,
        "worker_id": WORKER_ID,
        "lease_seconds": lease_seconds,
        **FROM_FRONT,
    }
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor(row_factory=claimed_row) as cur:
        return cur.execute(_sql.query("claim"), params).fetchall()


def pool(dsn: str) -> AsyncConnectionPool[Any]:
    """A pool like the worker's (autocommit), to open with `async with`."""
    return AsyncConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False)


def states(dsn: str) -> dict[int, str]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT id, state FROM pgqueue.runs").fetchall())
