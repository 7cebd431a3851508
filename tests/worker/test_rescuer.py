"""The rescuer alone: a run whose lease expired goes back to `queued` with its attempt used
(or to `failed` on its last one); a run under a valid lease stays where it is."""

from __future__ import annotations

import asyncio

import psycopg

import pgqueue
from pgqueue.worker.maintenance.rescuer import Rescuer
from tests.worker import parts


def expire(dsn: str, *run_ids: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.runs SET lease_expires_at = now() - interval '1 second'"
            " WHERE id = ANY(%s)",
            (list(run_ids),),
        )


def test_an_expired_lease_is_rescued_and_its_attempt_counts(app: pgqueue.App, dsn: str) -> None:
    @app.task(max_attempts=3)
    def retried() -> None: ...

    @app.task(max_attempts=1)
    def last() -> None: ...

    lost, held = retried.enqueue(), retried.enqueue()
    final = last.enqueue()
    parts.claim(dsn, 3)
    expire(dsn, lost.id, final.id)

    async def main() -> float:
        async with parts.pool(dsn) as pool:
            return await Rescuer(pool, ["default"], interval=0.25).tick()

    assert asyncio.run(main()) == 0.25  # the next round, after its interval
    assert parts.states(dsn) == {lost.id: "queued", held.id: "running", final.id: "failed"}
    rescued = app.get_run(lost.id)
    assert rescued.attempt == 1  # used: the next claim makes it attempt 2
    assert "lease expired" in (rescued.error or "")
    with psycopg.connect(dsn) as conn:
        kinds = conn.execute(
            "SELECT run_id, kind FROM pgqueue.run_errors ORDER BY run_id"
        ).fetchall()
    assert kinds == [(lost.id, "lease_expired"), (final.id, "lease_expired")]


def test_the_rescuer_serves_only_its_queues(app: pgqueue.App, dsn: str) -> None:
    @app.task(queue="elsewhere")
    def other() -> None: ...

    run = other.enqueue()
    parts.claim(dsn, 1, queue="elsewhere")
    expire(dsn, run.id)

    async def main() -> None:
        async with parts.pool(dsn) as pool:
            await Rescuer(pool, ["default"], interval=1).tick()

    asyncio.run(main())
    assert parts.states(dsn) == {run.id: "running"}
