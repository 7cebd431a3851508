"""The tally keeper alone: finished runs are folded into 5-second buckets once, and
what reads the last hour (pgqueue.finished_buckets, queue_stats, `pgqueue queues`)
counts the same before and after the fold, and after pruning."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql

import pgqueue
from pgqueue.db import sql as _sql
from pgqueue.ops.retention import Retention
from pgqueue.worker.maintenance.pruner import Pruner
from pgqueue.worker.maintenance.tally import INTERVAL, TallyKeeper
from tests.helpers import plan_nodes
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


def latencies(dsn: str) -> tuple[float, float, float, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pickup_p50_seconds, pickup_p95_seconds, duration_p50_seconds,"
            " duration_p95_seconds FROM pgqueue.queue_stats WHERE queue = 'mail'"
        ).fetchone()
    assert row is not None
    return row


def exact(dsn: str) -> tuple[float, float, float, float]:
    """The nearest-rank percentiles of every run finished in the last minute."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY p),"
            "       percentile_disc(0.95) WITHIN GROUP (ORDER BY p),"
            "       percentile_disc(0.5) WITHIN GROUP (ORDER BY d),"
            "       percentile_disc(0.95) WITHIN GROUP (ORDER BY d)"
            " FROM (SELECT extract(epoch FROM started_at - run_at)::float8 AS p,"
            "              extract(epoch FROM finished_at - started_at)::float8 AS d"
            "       FROM pgqueue.runs WHERE queue = 'mail' AND finished_at IS NOT NULL"
            "         AND finished_at >= now() - interval '55 seconds') x"
        ).fetchone()
    assert row is not None
    return row


def finish_spread(dsn: str, n: int, ago: tuple[float, float]) -> None:
    """n finished runs of queue mail, finished between ago[0] and ago[1] seconds ago, with
    pickups spread from 1 ms to 10 s and durations from 0 to 2 s (log-uniform)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT setseed(0.25)")
        conn.execute(
            "INSERT INTO pgqueue.runs (task, queue, state, run_at, started_at, finished_at)"
            " SELECT 't', 'mail', 'succeeded', f - d - p, f - d, f"
            " FROM (SELECT now() - (%(a)s + (%(b)s - %(a)s) * g / %(n)s) * interval '1 second'"
            "              AS f,"
            "              power(10, -3 + 4 * random()) * interval '1 second' AS p,"
            "              CASE WHEN g %% 10 = 0 THEN interval '0'"
            "                   ELSE power(10, -3 + 3.3 * random()) * interval '1 second'"
            "              END AS d"
            "       FROM generate_series(1, %(n)s) g) x",
            {"a": ago[0], "b": ago[1], "n": n},
        )
        conn.execute("ANALYZE pgqueue.runs")


def close(estimate: tuple[float, ...], truth: tuple[float, ...], within: float = 0.044) -> bool:
    """Within a histogram bin (4.4%), or 10 us for a zero."""
    return all(abs(e - t) <= max(within * t, 1e-5) for e, t in zip(estimate, truth, strict=True))


def test_latency_percentiles_come_from_the_tally_within_a_bin(dsn: str) -> None:
    """queue_stats's pickup and duration percentiles read the workers' latency histograms
    (and at most 1,000 unfolded runs), not every run of the last minute, and are within
    4.4% of the exact ones before and after the fold."""
    finish_spread(dsn, 600, (20, 50))
    truth = exact(dsn)
    assert close(latencies(dsn), truth)  # all unfolded: from the runs
    tick(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT sum(n) FILTER (WHERE kind = 'pickup'), sum(n) FILTER (WHERE kind = 'duration')"
            " FROM pgqueue.latency_tally"
        ).fetchone()
    assert row == (600, 600)
    assert close(latencies(dsn), truth)  # all folded: from the histograms
    tick(dsn)
    assert close(latencies(dsn), truth)  # nothing folded twice

    finish_spread(dsn, 20000, (22, 48))
    finish_spread(dsn, 3000, (0, 5))  # inside the keeper's lag
    tick(dsn)
    # 21,000 runs from the histograms and 1,000 of the 3,000 unfolded ones
    assert close(latencies(dsn), exact(dsn), within=0.1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET jit = off")
        [[plan]] = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM pgqueue.queue_stats"
        ).fetchall()
    runs = [n for n in plan_nodes(plan) if n.get("Relation Name") == "runs"]
    read = sum(n["Actual Rows"] for n in runs)
    # the unfolded runs, counted (3,000) and sampled for latency (at most 1,000 of them),
    # and never the 20,600 folded ones
    assert read <= 3000 + 3000, read


def test_the_fold_is_priced_below_jit_without_statistics(dsn: str) -> None:
    """Before autovacuum has analyzed pgqueue.tally_mark (or where it is off), the planner
    takes the one-row mark for thousands of rows; priced from that, the fold crossed
    jit_above_cost and was JIT-compiled on every round, 0.2 s of server CPU each."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        [[tuples]] = conn.execute(
            "SELECT reltuples FROM pg_class WHERE oid = 'pgqueue.tally_mark'::regclass"
        ).fetchall()
        assert tuples <= 0  # never analyzed
        conn.execute("SET plan_cache_mode = force_generic_plan")
        [[plan]] = conn.execute(
            "EXPLAIN (FORMAT JSON) " + _sql.query("tally_finished"), {"lag_seconds": 10}
        ).fetchall()
        [[jit_above]] = conn.execute("SELECT current_setting('jit_above_cost')::float8").fetchall()
    assert plan[0]["Plan"]["Total Cost"] < jit_above


def database_sql(template: LiteralString, conn: psycopg.Connection[Any]) -> sql.Composed:
    [[name]] = conn.execute("SELECT current_database()").fetchall()
    return sql.SQL(template).format(sql.Identifier(name))


def test_the_statements_over_finished_runs_run_without_jit(app: pgqueue.App, dsn: str) -> None:
    """The tally, the workers' pruner, a prune by hand and a bulk retry run with jit off
    (sql/no_jit.sql): on a deep queue whose statistics were taken before its runs
    finished, the planner priced a prune that found nothing above jit_above_cost, and
    compiling it took 985 ms against 69 ms of running it, at every worker start. Triggers
    record the setting each statement's writes ran under."""

    @app.task(queue="mail")
    def send() -> None: ...

    ids = [send.enqueue().id for _ in range(6)]
    finish(dsn, ids[:4], 120)
    finish(dsn, ids[4:], 120, state="failed")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""
            CREATE TABLE public.jit_seen (what text, jit text);
            CREATE FUNCTION public.note_jit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO public.jit_seen VALUES (TG_ARGV[0], current_setting('jit'));
                RETURN NULL;
            END $$;
            CREATE TRIGGER note_tally AFTER INSERT ON pgqueue.finished_tally
                FOR EACH STATEMENT EXECUTE FUNCTION public.note_jit('tally');
            CREATE TRIGGER note_prune AFTER DELETE ON pgqueue.runs
                FOR EACH STATEMENT EXECUTE FUNCTION public.note_jit('prune');
            CREATE TRIGGER note_retry AFTER UPDATE ON pgqueue.runs
                FOR EACH STATEMENT EXECUTE FUNCTION public.note_jit('retry');
        """)
        conn.execute(database_sql("ALTER DATABASE {} SET jit = on", conn))

    def seen() -> list[tuple[str, str]]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute("DELETE FROM public.jit_seen RETURNING what, jit").fetchall()
        return sorted({(w, j) for w, j in rows})

    async def prune_as_a_worker() -> None:
        async with parts.pool(dsn) as pool:
            await Pruner(pool, Retention(succeeded=timedelta(seconds=60))).tick()

    try:
        tick(dsn)
        assert seen() == [("tally", "off")]
        asyncio.run(prune_as_a_worker())
        assert seen() == [("prune", "off")]
        assert sorted(parts.states(dsn).values()) == ["failed", "failed"]
        assert app.count_where("retry", state="failed") == 2
        assert app.retry_where(state="failed") == 2
        assert seen() == [("retry", "off")]
        finish(dsn, ids[4:], 120)
        assert app.prune(60)["succeeded"] == 2
        assert ("prune", "off") in seen()
        with psycopg.connect(dsn, autocommit=True) as conn:  # the session's own setting
            assert conn.execute("SHOW jit").fetchone() == ("on",)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(database_sql("ALTER DATABASE {} RESET jit", conn))
