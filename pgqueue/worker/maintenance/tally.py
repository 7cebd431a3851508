"""The tally keeper: folds the runs that finished a few seconds ago into
pgqueue.finished_tally (one row per queue, state and 5-second bucket), so that "what
finished in the last hour" (pgqueue.queue_stats, pgqueue.finished_buckets, the
dashboard) reads a few hundred rows instead of an hour of runs. Every worker runs one;
the tally's mark row lets one fold at a time, and the others skip it."""

from __future__ import annotations

from pgqueue.db import sql as _sql
from pgqueue.ops.retention import TALLY_LAG_SECONDS as LAG_SECONDS
from pgqueue.worker._service import Pool, Service

INTERVAL = 5.0  # a bucket's width: each round folds about one bucket
PRUNE_EVERY = 720  # rounds (an hour): buckets older than a day are dropped


class TallyKeeper(Service):
    name = "tally keeper"

    def __init__(self, pool: Pool, interval: float = INTERVAL) -> None:
        self.pool = pool
        self.interval = interval
        self.rounds = 0

    async def tick(self) -> float:
        async with self.pool.connection() as conn:
            async with conn.transaction():  # no JIT: compiling took longer than the tally
                await conn.execute(_sql.query("no_jit"))
                cur = await conn.execute(_sql.query("tally_finished"), {"lag_seconds": LAG_SECONDS})
                row = await cur.fetchone()
            if self.rounds % PRUNE_EVERY == 0:
                await conn.execute(_sql.query("prune_tally"))
        self.rounds += 1
        behind = row is not None and row[1]
        return 0.0 if behind else self.interval
