"""The tally keeper alone: finished runs are folded into 5-second buckets once, and
what reads the last hour (pgqueue.finished_buckets, queue_stats, `pgqueue queues`)
counts the same before and after the fold, and after pruning."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue.retention import Retention
from pgqueue.worker.maintenance.pruner import Pruner
from pgqueue.worker.maintenance.tally import INTERVAL, TallyKeeper
from tests.worker import parts


@pytest.fixture(autouse=True)
def mark_an_hour_back(dsn: str) -> None:
    """As a fresh migration leaves it (the test database's template may be older)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.tally_mark SET upto = date_bin('5 seconds',"
            " now() - interval '1 hour', timestamptz '2000-01-01 UTC')"
        )


def finish(dsn: str, ids: list[int], seconds_ago: float, state: str = "succeeded") -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgqueue.runs SET state = %s, started_at = run_at + interval '2 seconds',"
            " finished_at = now() - %s * interval '1 second' WHERE id = ANY(%s)",
            (state, seconds_ago, ids),
        )


def last_hour(dsn: str) -> dict[tuple[str, str], int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT queue, state, sum(n)::int FROM pgqueue.finished_buckets"
            " WHERE bucket >= now() - interval '1 hour' GROUP BY 1, 2"
        ).fetchall()
    return {(q, s): n for q, s, n in rows}


def tallied(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(sum(n), 0)::int FROM pgqueue.finished_tally").fetchone()
    assert row is not None
    return int(row[0])


def tick(dsn: str) -> float:
    async def main() -> float:
        async with parts.pool(dsn) as pool:
            return await TallyKeeper(pool).tick()

    return asyncio.run(main())


def test_finished_runs_are_folded_once_and_counted_the_same(app: pgqueue.App, dsn: str) -> None:
    @app.task(queue="mail")
    def send() -> None: ...

    old = [send.enqueue().id for _ in range(5)]
    recent = [send.enqueue().id for _ in range(3)]
    failed = [send.enqueue().id for _ in range(2)]
    finish(dsn, old, 600)
    finish(dsn, failed, 300, state="failed")
    finish(dsn, recent, 1)  # inside the keeper's lag: left to a later round
    expected = {("mail", "succeeded"): 8, ("mail", "failed"): 2}
    assert last_hour(dsn) == expected  # from the runs alone
    assert tick(dsn) == INTERVAL
    assert tallied(dsn) == 7  # the old and the failed ones
    assert last_hour(dsn) == expected  # the tally and the runs after its mark
    assert tick(dsn) == INTERVAL
    assert tallied(dsn) == 7  # nothing folded twice
    with psycopg.connect(dsn, autocommit=True) as conn:
        pickup = conn.execute(
            "SELECT sum(pickup_sum) / sum(picked) FROM pgqueue.finished_tally"
        ).fetchone()
    assert pickup is not None and abs(pickup[0] - 2.0) < 1e-6
    stats = {q["queue"]: q for q in app.queue_summary()}["mail"]
    assert (stats["succeeded_last_hour"], stats["failed_last_hour"]) == (8, 2)


def test_pruning_keeps_the_last_hour_counted(app: pgqueue.App, dsn: str) -> None:
    """The workers' pruner leaves alone the runs the tally has not counted yet, whatever
    the retention; a prune by hand folds the tally first and deletes what it is asked to
    (the last few seconds' runs then go uncounted)."""

    @app.task(queue="mail")
    def send() -> None: ...

    ids = [send.enqueue().id for _ in range(4)]
    finish(dsn, ids[:3], 120)
    finish(dsn, ids[3:], 0)

    async def prune_as_a_worker() -> None:
        async with parts.pool(dsn) as pool:
            await Pruner(pool, Retention(succeeded=timedelta(0))).tick()

    tick(dsn)
    asyncio.run(prune_as_a_worker())
    assert list(parts.states(dsn)) == [ids[3]]  # not yet tallied: kept
    assert last_hour(dsn) == {("mail", "succeeded"): 4}
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT finished_last_hour FROM pgqueue.queue_stats WHERE queue = 'mail'"
        ).fetchone()
    assert row == (4,)
    assert app.prune(0)["succeeded"] == 1  # by hand: what it was asked to
    assert parts.states(dsn) == {}


def test_one_keeper_folds_at_a_time(app: pgqueue.App, dsn: str) -> None:
    """A keeper that finds the mark locked by another skips its round."""

    @app.task(queue="mail")
    def send() -> None: ...

    ids = [send.enqueue().id for _ in range(3)]
    finish(dsn, ids, 600)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute("SELECT 1 FROM pgqueue.tally_mark FOR UPDATE")
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        assert tick(dsn) == INTERVAL
        assert tallied(dsn) == 0
    finally:
        release.set()
        holder.join(10)
    tick(dsn)
    assert tallied(dsn) == 3


def test_a_tally_far_behind_catches_up_an_hour_a_round(dsn: str, app: pgqueue.App) -> None:
    @app.task(queue="mail")
    def send() -> None: ...

    ids = [send.enqueue().id for _ in range(2)]
    finish(dsn, ids, 2 * 3600 + 60)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgqueue.tally_mark SET upto = now() - interval '3 hours'")
    rounds: list[Any] = [tick(dsn) for _ in range(3)]
    assert rounds[:2] == [0.0, 0.0]  # behind: the next round at once
    assert rounds[2] == INTERVAL
    assert tallied(dsn) == 2
