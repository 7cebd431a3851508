"""Semaphores: how to claim from a queue with cluster-wide limits, and from one without.

A queue with `concurrency` and/or `group_concurrency` is claimed by the SQL function
pgqueue.claim_limited, which holds the queue's row lock for its one statement, so
claimers of that queue take turns and count exactly; so is a queue with a group rate
limit or ordered groups. A queue whose only limit is a queue-level rate limit is claimed
by claim_rated.sql (claim.sql's scans under the queue's row lock). A claim that a rate
limit cut short says when to try again. Queues without limits use the lock-free SKIP
LOCKED claim. Which queues have which limits: maintenance/queue_limits.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psycopg.types.numeric import Int2, Int8

from pgqueue.db import sql as _sql
from pgqueue.worker._claimed import claimed_row
from pgqueue.worker.records import Claimed

if TYPE_CHECKING:
    from psycopg import AsyncConnection


FRONT = (-32768, 0)  # a (priority, id) before every run's: claim.sql reads from the front
FRONT_EVERY = 0.1  # seconds between a worker's claims of a queue from its front, at most


class ClaimMarks:
    """Where a worker's next claim of each queue starts (sql/claim.sql): after the largest
    (priority, id) its last claim took, so that it does not read again through the dead
    index entries of the runs claimed since the last VACUUM. More urgent priorities are
    always read from the front. Runs that came back behind the mark (retries, wakes,
    rescues, enqueues that committed late) are claimed when a claim finds fewer runs past
    the mark than it asked for, and at the latest by the next claim from the front: one
    every FRONT_EVERY seconds, or after a claim that found nothing."""

    def __init__(self, every: float = FRONT_EVERY) -> None:
        self.every = every
        self._marks: dict[str, tuple[int, int]] = {}
        self._front_at: dict[str, float] = {}

    def start(self, queue: str) -> dict[str, int]:
        """claim.sql's after_priority and after_id for the next claim of `queue`."""
        mark = self._marks.get(queue)
        now = time.monotonic()
        if mark is None or now - self._front_at.get(queue, -self.every) >= self.every:
            self._front_at[queue] = now
            mark = FRONT
        # Int2/Int8: the same parameter types whatever the values (psycopg sends a plain
        # int as the smallest type that holds it): the claim stays one prepared statement.
        return {"after_priority": Int2(mark[0]), "after_id": Int8(mark[1])}

    def landed(self, queue: str, rows: Sequence[Claimed]) -> None:
        """A claim of `queue` took `rows`: the next one starts after the last of them."""
        if rows:
            self._marks[queue] = max((row.priority, row.id) for row in rows)
        else:
            self._marks.pop(queue, None)


def claim_query(queue: str, limited: set[str], rate_only: set[str]) -> str:
    """The claim of `queue`: claim_rated (a queue-level rate limit and nothing else: the
    plain claim's scans under the queue's row lock), claim_limited (any other limit), or
    claim (no limit)."""
    if queue in rate_only:
        return "claim_rated"
    return "claim_limited" if queue in limited else "claim"


async def claim(
    conn: AsyncConnection[Any], queue: str, params: dict[str, Any], query: str
) -> list[Claimed]:
    """Claim up to params["limit"] runs of `queue` with `query` (claim_query): one
    statement, one round trip. claim_limited also takes params["finishing"] (see
    sql/claim_limited.sql); claim and claim_rated take a ClaimMarks start."""
    async with conn.cursor(row_factory=claimed_row) as cur:
        await cur.execute(_sql.query(query), params)
        return await cur.fetchall()


async def rate_open_in(conn: AsyncConnection[Any], queue: str) -> float | None:
    """Seconds until `queue` may start a run again: a rate limit opens (as its last claim
    found), its backoff or the first of its group backoffs ends (None: none holds it)."""
    cur = await conn.execute(_sql.query("rate_open_at"), {"queue": queue})
    row = await cur.fetchone()
    return None if row is None or row[0] is None else max(0.0, float(row[0]))
