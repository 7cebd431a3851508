"""The stager alone: scheduled runs whose time has come go to `queued` (and the producer
is woken); the next round comes when the next run is due, or after the interval."""

from __future__ import annotations

import asyncio

import psycopg

import pgqueue
from pgqueue.worker.maintenance.stager import Stager
from tests.worker import parts


def test_due_runs_are_staged_and_the_next_round_waits_for_the_next_due(
    app: pgqueue.App, dsn: str
) -> None:
    @app.task
    def t() -> None: ...

    due = t.options(delay=3600).enqueue()
    soon = t.options(delay=3600).enqueue()
    later = t.options(delay=3600).enqueue()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.runs SET run_at = now() - interval '1 second' WHERE id = %s",
            (due.id,),
        )
    woken: list[bool] = []

    async def main() -> tuple[float, float]:
        async with parts.pool(dsn) as pool:
            stager = Stager(pool, ["default"], 5.0, lambda: woken.append(True))
            first = await stager.tick()
            assert woken == [True]
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "UPDATE pgqueue.runs SET run_at = now() + interval '0.2 seconds' WHERE id = %s",
                    (soon.id,),
                )
            return first, await stager.tick()

    first, second = asyncio.run(main())
    assert first == 5.0  # the next due run is an hour away: the interval caps the wait
    assert 0.01 <= second <= 0.2  # until `soon` is due, on the database's clock
    assert woken == [True]  # the second round staged nothing
    assert parts.states(dsn) == {due.id: "queued", soon.id: "scheduled", later.id: "scheduled"}
