"""The statements that read finished runs by time read runs_finished_queue_idx one queue at
a time, the queues found by a loose scan of that index (downward) (sql/parts/finished_queues.sql):
every queue is visited, the first, the last and one whose name sorts between them, and a
queue without finished runs is no gap. Each statement's result is the one a plain read of
the table in the same order gives."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgqueue.dashboard import data
from pgqueue.db import sql as _sql
from pgqueue.ops import bulk as _bulk
from pgqueue.ops.retention import prune_step

Conn = psycopg.Connection[Any]
FINISHED = ("succeeded", "failed", "canceled")
# 'mid' sorts between 'alpha' and 'zulu'; 'idle' (between 'alpha' and 'mid') has live runs
# only, 'empty' none at all (a name in pgqueue.queues)
QUEUES = ("alpha", "mid", "zulu")


@pytest.fixture
def history(conn: Conn) -> Conn:
    """Finished runs of three queues interleaved in time (some with the same finish time,
    so that id breaks the tie), an hour ago up to a minute ago; queued runs of 'idle'."""
    conn.execute("""
        UPDATE pgqueue.tally_mark SET upto = now() - interval '2 hours';
        INSERT INTO pgqueue.queues (name) VALUES ('empty');
        INSERT INTO pgqueue.runs (task, queue, state, run_at, started_at, finished_at)
        SELECT 't', (ARRAY['alpha', 'mid', 'zulu'])[1 + g % 3],
               (ARRAY['succeeded', 'failed', 'canceled', 'succeeded'])[1 + g % 4],
               now() - interval '1 hour', now() - interval '1 hour',
               now() - interval '1 minute' - (g / 2) * interval '10 seconds'
        FROM generate_series(1, 300) g;
        INSERT INTO pgqueue.runs (task, queue, state) SELECT 't', 'idle', 'queued'
        FROM generate_series(1, 5);
        ANALYZE pgqueue.runs;
    """)
    return conn


def by_queue_and_state(conn: Conn) -> dict[tuple[str, str], int]:
    rows = conn.execute(
        "SELECT queue, state, count(*) FROM pgqueue.runs"
        " WHERE state IN ('succeeded', 'failed', 'canceled') GROUP BY 1, 2"
    ).fetchall()
    return {(q, s): n for q, s, n in rows}


def test_every_queue_is_walked_and_none_without_finished_runs(history: Conn) -> None:
    walked = history.execute(f"SELECT queue FROM {_sql.part('finished_queues')} q").fetchall()
    assert [q for (q,) in walked] == list(reversed(QUEUES))
    history.execute("DELETE FROM pgqueue.runs WHERE queue = 'mid'")
    walked = history.execute(f"SELECT queue FROM {_sql.part('finished_queues')} q").fetchall()
    assert [q for (q,) in walked] == ["zulu", "alpha"]
    history.execute("DELETE FROM pgqueue.runs WHERE state <> 'queued'")
    assert history.execute(f"SELECT queue FROM {_sql.part('finished_queues')} q").fetchall() == []


def test_the_counts_of_finished_runs_cover_every_queue(history: Conn) -> None:
    expected = by_queue_and_state(history)
    assert {q for q, _ in expected} == set(QUEUES)
    # after the tally's mark: read live, queue by queue
    totals = history.execute(_sql.query("dashboard_totals")).fetchall()
    assert {(q, s): n for q, s, n in totals} == expected
    buckets = history.execute(
        "SELECT queue, state, sum(n) FROM pgqueue.finished_buckets GROUP BY 1, 2"
    ).fetchall()
    assert {(q, s): n for q, s, n in buckets} == expected
    stats = history.execute(
        "SELECT queue, finished_last_hour, pickup_p50_seconds IS NULL"
        " FROM pgqueue.queue_stats ORDER BY queue"
    ).fetchall()
    hour = {q: sum(n for (qq, _), n in expected.items() if qq == q) for q in QUEUES}
    assert stats == [
        ("alpha", hour["alpha"], True),  # the latency sample: the last minute's runs only
        ("empty", 0, True),
        ("idle", 0, True),
        ("mid", hour["mid"], True),
        ("zulu", hour["zulu"], True),
    ]
    # folded into the tally: the same counts, from the tally tables
    rounds = 0
    while row := history.execute(_sql.query("tally_finished"), {"lag_seconds": 0}).fetchone():
        rounds += 1  # an hour a round, from two hours ago
        if not row[1]:
            break
    assert rounds == 2
    tallied = history.execute("SELECT queue, state, n FROM pgqueue.finished_totals").fetchall()
    assert {(q, s): n for q, s, n in tallied} == expected
    totals = history.execute(_sql.query("dashboard_totals")).fetchall()
    assert {(q, s): n for q, s, n in totals} == expected


def test_the_latency_sample_reads_the_runs_since_the_mark_of_every_queue(conn: Conn) -> None:
    conn.execute("""
        UPDATE pgqueue.tally_mark SET upto = now() - interval '30 seconds';
        INSERT INTO pgqueue.runs (task, queue, state, run_at, started_at, finished_at)
        SELECT 't', q, 'succeeded', now() - interval '3 seconds', now() - interval '2 seconds',
               now() - interval '1 second'
        FROM unnest(ARRAY['alpha', 'mid', 'zulu']) q;
    """)
    stats = conn.execute(
        "SELECT queue, finished_last_minute, pickup_p50_seconds > 0.9"
        " FROM pgqueue.queue_stats ORDER BY queue"
    ).fetchall()
    assert stats == [("alpha", 1, True), ("mid", 1, True), ("zulu", 1, True)]


@pytest.mark.parametrize("state", FINISHED)
def test_a_prune_deletes_the_oldest_of_every_queue_first(history: Conn, state: str) -> None:
    oldest = history.execute(
        "SELECT id FROM pgqueue.runs WHERE state = %s ORDER BY finished_at, id", (state,)
    ).fetchall()
    query, params = prune_step(state, timedelta(0), 7)
    deleted: list[int] = []
    while True:
        before = {i for (i,) in history.execute("SELECT id FROM pgqueue.runs").fetchall()}
        n = history.execute(query, params).rowcount
        after = {i for (i,) in history.execute("SELECT id FROM pgqueue.runs").fetchall()}
        assert len(before - after) == n
        if not n:
            break
        # each batch: the next 7 in (finished_at, id) order, whatever their queue
        assert before - after == {i for (i,) in oldest[len(deleted) : len(deleted) + n]}
        deleted += sorted(before - after)
    assert len(deleted) == len(oldest)
    assert all(s != state for (_, s) in by_queue_and_state(history))


def test_a_bulk_retry_walks_every_queue_in_finish_order(history: Conn) -> None:
    for states in (("succeeded", "canceled"), ("failed",)):
        filt = _bulk.Filter.of(state=states)
        expected = history.execute(
            "SELECT finished_at, id FROM pgqueue.runs WHERE state = ANY (%s)"
            " ORDER BY finished_at, id",
            (list(states),),
        ).fetchall()
        assert _bulk.count(history, "retry", filt) == len(expected)
        query = _bulk.retry_query(states, 5)
        upto = history.execute("SELECT now()").fetchone()
        assert upto is not None
        params = filt.params() | {"upto_at": upto[0], "after_at": _bulk.EPOCH, "after_id": 0}
        ends = []
        with history.transaction(force_rollback=True):
            while True:
                last_at, last_id, changed = history.execute(query, params).fetchone() or ()
                if last_id is None:
                    break
                ends.append((last_at, last_id, changed))
                params |= {"after_at": last_at, "after_id": last_id}
        # the end of each batch of 5: the 5th, 10th, ... run in (finished_at, id) order
        assert [(at, i) for at, i, _ in ends] == [*expected[4::5], *expected[-1:]][: len(ends)]
        assert sum(c for _, _, c in ends) == len(expected)


@pytest.mark.parametrize("filt", [data.RunFilter(state="succeeded"), data.RunFilter(task="t")])
def test_the_list_of_finished_runs_merges_every_queue(history: Conn, filt: data.RunFilter) -> None:
    states = ("succeeded",) if filt.state else FINISHED
    expected = history.execute(
        "SELECT id FROM pgqueue.runs WHERE state = ANY (%s) ORDER BY finished_at DESC, id DESC",
        (list(states),),
    ).fetchall()
    listed: list[int] = []
    cursor = None
    if filt.state is None:  # the unfinished runs' section first: the 5 queued runs
        page = data.list_runs(history, filt, None, limit=5)
        assert [r["state"] for r in page["runs"]] == ["queued"] * 5
        cursor = page["next"]
    while True:
        page = data.list_runs(history, filt, cursor, limit=17)
        listed += [r["id"] for r in page["runs"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert listed == [i for (i,) in expected]


def test_upgrade_to_0034_drops_runs_finished_idx_and_reloads_the_views(
    server_params: dict[str, Any],
) -> None:
    """Migration 0034: runs_finished_idx is gone, runs_finished_queue_idx and
    runs_failed_idx stay, and the views read the queue's index (the counts are those
    before)."""
    from pgqueue.db import migrate
    from tests.sql.test_migrations import database_at

    counts = "SELECT queue, state, sum(n) FROM pgqueue.finished_buckets GROUP BY 1, 2 ORDER BY 1, 2"
    indexes = (
        "SELECT indexname FROM pg_indexes WHERE schemaname = 'pgqueue'"
        " AND indexname IN ('runs_finished_idx', 'runs_finished_queue_idx', 'runs_failed_idx')"
        " ORDER BY 1"
    )
    with database_at(server_params, "0033") as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("""
                UPDATE pgqueue.tally_mark SET upto = now() - interval '1 hour';
                INSERT INTO pgqueue.runs (task, queue, state, finished_at)
                SELECT 't', q, s, now() - interval '1 minute'
                FROM unnest(ARRAY['a', 'm', 'z']) q, unnest(ARRAY['succeeded', 'failed']) s;
            """)
            before = conn.execute(counts).fetchall()
            assert len(conn.execute(indexes).fetchall()) == 3
        migrate.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute(indexes).fetchall() == [
                ("runs_failed_idx",),
                ("runs_finished_queue_idx",),
            ]
            assert conn.execute(counts).fetchall() == before
            for view in ("finished_buckets", "queue_stats"):
                text = conn.execute(
                    "SELECT pg_get_viewdef(%s::regclass)", (f"pgqueue.{view}",)
                ).fetchone()
                assert text is not None and "WITH RECURSIVE walk" in text[0], view
