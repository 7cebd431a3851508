"""Semaphores: which served queues have cluster-wide limits, and how to claim from them.

A queue with `concurrency` and/or `group_concurrency` is claimed by the SQL function
pgqueue.claim_limited, which holds the queue's row lock for its one statement, so
claimers of that queue take turns and count exactly. Queues without limits use the
lock-free SKIP LOCKED claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psycopg.rows import dict_row

from pgqueue import _sql
from pgqueue.worker._service import Service

if TYPE_CHECKING:
    from psycopg import AsyncConnection


class QueueLimits(Service):
    """Keeps worker.limited up to date (also refreshed at once on NOTIFY pgqueue_config)."""

    name = "queue limits"
    interval = 5.0

    async def refresh(self) -> None:
        async with self.worker.pool.connection() as conn:
            cur = await conn.execute(_sql.query("queue_limits"))
            self.worker.limited = {row[0] for row in await cur.fetchall()}

    async def tick(self) -> float:
        await self.refresh()
        return self.interval


async def claim(
    conn: AsyncConnection[Any], queue: str, params: dict[str, Any], limited: bool
) -> list[dict[str, Any]]:
    """Claim up to params["limit"] runs of `queue`: one statement, one round trip.
    A limited claim also takes params["finishing"] (see sql/claim_limited.sql)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_sql.query("claim_limited" if limited else "claim"), params)
        return await cur.fetchall()
