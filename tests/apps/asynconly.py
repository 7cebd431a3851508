"""An app whose tasks are all async: a worker started without --concurrency runs 100 at once."""

from __future__ import annotations

import psycopg

import pgqueue

app = pgqueue.App()


@app.task(name="registered_concurrency")
async def registered_concurrency() -> list[int]:
    """The concurrency the running workers registered (pgqueue.workers)."""
    async with await psycopg.AsyncConnection.connect(app.dsn) as conn:
        cur = await conn.execute("SELECT concurrency FROM pgqueue.workers ORDER BY concurrency")
        return [row[0] for row in await cur.fetchall()]


@app.task(name="async_noop", queue="other")
async def async_noop() -> None:
    """No-op, in a second queue."""
