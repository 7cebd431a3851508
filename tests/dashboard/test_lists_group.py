"""Lists of one group's runs in any queue: with runs_live_group_idx and
runs_finished_group_idx (`pgqueue runs search-index --by group`) exact at any depth,
keyset paginated over them, with or without a state or a queue; without them a bounded
filter of SCAN runs a page, as before, but for a limited queue's groups, which its own
indexes answer."""

from __future__ import annotations

import urllib.parse
from typing import Any

import psycopg
import pytest
from psycopg import sql

pytest.importorskip("starlette")

from fastapi.testclient import TestClient

from pgqueue.dashboard import data
from pgqueue.ops import search_indexes
from tests.dashboard.test_data import FILTERS, START, rows_read
from tests.dashboard.test_lists import search_index
from tests.dashboard.test_lists_sections import generic_plan, pages_of, runs_scans

# The runs of group 'mine', in queues 'a' and 'b' (neither limited): enqueued first,
# finished first
MINE = {"queued": 120, "scheduled": 30, "running": 10, "waiting": 5, "finished": 150}
OTHERS = 3500  # runs of other groups, or none, in each of four states, all newer

# Each alone: psycopg sends a statement with parameters as one prepared statement
FILL = [
    """
    INSERT INTO pgqueue.runs (task, queue, group_key, state, finished_at, error)
      SELECT 't', (ARRAY['a', 'b'])[1 + i %% 2], 'mine',
             (ARRAY['succeeded', 'failed', 'canceled'])[1 + i %% 3],
             now() - interval '1 day' - i * interval '1 s', 'KeyError: x'
      FROM generate_series(1, %(finished)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, group_key, priority)
      SELECT 't', (ARRAY['a', 'b'])[1 + i %% 2], 'mine', i %% 3
      FROM generate_series(1, %(queued)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, group_key, state, run_at)
      SELECT 't', (ARRAY['a', 'b'])[1 + i %% 2], 'mine', 'scheduled', now() + interval '1 hour'
      FROM generate_series(1, %(scheduled)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, group_key, state, lease_token, lease_expires_at)
      SELECT 't', (ARRAY['a', 'b'])[1 + i %% 2], 'mine', 'running', gen_random_uuid(),
             now() + interval '1 hour'
      FROM generate_series(1, %(running)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, group_key, state, wait_event, wait_key, run_at)
      SELECT 't', (ARRAY['a', 'b'])[1 + i %% 2], 'mine', 'waiting', 'e', i::text,
             now() + interval '1 hour'
      FROM generate_series(1, %(waiting)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, group_key, priority)
      SELECT 't', 'a', CASE WHEN i %% 2 = 0 THEN 'g' || i %% 50 ELSE '' END, i %% 2
      FROM generate_series(1, %(others)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, group_key, state, run_at)
      SELECT 't', 'a', 'g' || i %% 50, 'scheduled', now() + interval '1 hour'
      FROM generate_series(1, %(others)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, group_key, state, lease_token, lease_expires_at)
      SELECT 't', 'b', 'g' || i %% 50, 'running', gen_random_uuid(), now() + interval '1 hour'
      FROM generate_series(1, %(others)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, group_key, state, finished_at)
      SELECT 't', 'a', 'g' || i %% 50, 'succeeded', now() - i * interval '1 ms'
      FROM generate_series(1, %(others)s) i
    """,
]

UNFINISHED_MINE = sum(MINE.values()) - MINE["finished"]


@pytest.fixture
def behind(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """The runs of MINE, then OTHERS runs of other groups queued, scheduled, running and
    finished after them, with the group's indexes (`pgqueue runs search-index --by
    group`)."""
    search_indexes.build(conn, "group")
    params = {**MINE, "others": OTHERS}
    for statement in FILL:
        conn.execute(statement, params)
    conn.execute("ANALYZE pgqueue.runs")
    return conn


def expected(
    conn: psycopg.Connection[Any], state: str | None = None, queue: str | None = None
) -> list[int]:
    """The ids of group 'mine''s runs in `state` and `queue` (None: any): the unfinished
    newest first, then the finished most recently finished first (the list's order)."""
    rows = conn.execute(
        "SELECT id, state, queue, finished_at FROM pgqueue.runs WHERE group_key = 'mine'"
    ).fetchall()
    rows = [r for r in rows if state in (None, r[1]) and queue in (None, r[2])]
    unfinished = sorted((r[0] for r in rows if r[3] is None), reverse=True)
    finished = sorted(((r[3], r[0]) for r in rows if r[3] is not None), reverse=True)
    return unfinished + [r[1] for r in finished]


@pytest.mark.parametrize(
    ("state", "queue"),
    [
        (None, None),
        (None, "b"),
        ("queued", None),
        ("scheduled", "a"),
        ("failed", None),
        ("succeeded", "b"),
    ],
)
def test_a_group_is_listed_exactly_at_any_depth(
    web: TestClient, behind: psycopg.Connection[Any], state: str | None, queue: str | None
) -> None:
    """A group's runs, older than 14,000 runs of other groups: with its indexes every
    page is full but the last, and the pages hold every match once, in the list's order
    (with no state: unfinished newest first, then finished most recently finished
    first); a queue filters the group's runs read."""
    filt = {"group": "mine", "state": state, "queue": queue}
    query = urllib.parse.urlencode({k: v for k, v in filt.items() if v})
    pages = pages_of(web, query, 25)
    assert [len(p["runs"]) for p in pages[:-1]] == [25] * (len(pages) - 1)
    assert [r["id"] for p in pages for r in p["runs"]] == expected(behind, state, queue)
    assert all(p["scanned"] <= sum(MINE.values()) for p in pages)
    if state is None:  # the cursor names its section
        cursors = [p["next"] for p in pages[:-1]]
        assert cursors[0].startswith("unfinished:") and cursors[-1].startswith("finished:")


def test_a_group_without_its_indexes_is_bounded_and_right(
    web: TestClient, behind: psycopg.Connection[Any], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the group's indexes a group in an unlimited queue is a filter of SCAN runs
    a page: the first pages, of other groups' newer runs, are empty, the pages still
    hold every match once, and the count is an estimate; the CLI builds them back."""
    search_index(dsn, capsys, "--by", "group", "--drop")
    assert not search_indexes.ready(behind, "group")
    pages = pages_of(web, "state=queued&group=mine", 50)
    assert pages[0]["scanned"] == data.SCAN and pages[0]["runs"] == []
    assert [r["id"] for p in pages for r in p["runs"]] == expected(behind, "queued")
    pages = pages_of(web, "group=mine", 50)  # no sections: along the primary key
    assert pages[0]["next"].isdigit()
    assert sorted(r["id"] for p in pages for r in p["runs"]) == sorted(expected(behind))
    url = "/api/runs/count?state=queued&group=mine"
    assert web.get(url).json()["exact"] is False
    assert "ready" in search_index(dsn, capsys, "--by", "group")
    assert web.get(url).json() == {"count": MINE["queued"], "exact": True}
    # the count, planned for its values (unprepared), reads the group's index: the
    # planner proves its predicate's group_key <> '' from group_key = 'mine'
    for state, index in (("queued", "runs_live_group_idx"), ("failed", "runs_finished_group_idx")):
        count = data.states_query("dashboard_count", states=(state,))
        params = {"queue": None, "task": None, "group": "mine", "cap": data.EXACT_UP_TO + 1}
        row = behind.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + count, params).fetchone()
        assert row is not None
        scans = runs_scans(row[0])
        assert index in {n.get("Index Name") for n in scans}, scans
        assert all(n["Node Type"] != "Seq Scan" for n in scans), scans
    assert web.get("/api/runs/count?state=failed&group=mine").json() == {
        "count": MINE["finished"] // 3,
        "exact": True,
    }


def test_search_index_by_group(
    conn: psycopg.Connection[Any], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pgqueue runs search-index --by group` builds both indexes, partial on the runs
    with a group; `--drop` drops them; building again over a half-built one rebuilds it."""
    names = "pgqueue.runs_live_group_idx and pgqueue.runs_finished_group_idx"
    out = search_index(dsn, capsys, "--by", "group")
    assert out.strip() == f"{names} ready: the dashboard's lists of one group's runs read it"
    assert search_indexes.ready(conn, "group")
    assert not search_indexes.ready(conn, "task")
    rows = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'pgqueue'"
        " AND indexname IN ('runs_live_group_idx', 'runs_finished_group_idx')"
        " ORDER BY indexname"
    ).fetchall()
    assert [r[0] for r in rows] == ["runs_finished_group_idx", "runs_live_group_idx"]
    assert "(group_key, finished_at, id)" in rows[0][1] and "<> ''::text" in rows[0][1]
    assert "(group_key, state, id)" in rows[1][1] and "<> ''::text" in rows[1][1]
    assert "ready" in search_index(dsn, capsys, "--by", "group")  # again: nothing to do
    # an invalid one (a build that failed) is rebuilt
    conn.execute(
        "UPDATE pg_index SET indisvalid = false"
        " WHERE indexrelid = 'pgqueue.runs_live_group_idx'::regclass"
    )
    assert not search_indexes.ready(conn, "group")
    search_index(dsn, capsys, "--by", "group")
    assert search_indexes.ready(conn, "group")
    out = search_index(dsn, capsys, "--by", "group", "--drop")
    assert out.strip() == f"dropped {names}: the lists of one group's runs read 2,000 runs a page"
    assert not search_indexes.ready(conn, "group")


GROUP = data.RunFilter(group="mine")


@pytest.mark.parametrize(
    ("filt", "section", "index", "mine"),
    [
        (GROUP, data.UNFINISHED, "runs_live_group_idx", UNFINISHED_MINE),
        (GROUP, data.FINISHED, "runs_finished_group_idx", MINE["finished"]),
        (data.RunFilter(queue="a", group="mine"), data.UNFINISHED, "runs_live_group_idx", 165),
        (data.RunFilter(queue="a", group="mine"), data.FINISHED, "runs_finished_group_idx", 150),
        *(
            (data.RunFilter(state=s, group="mine"), "", "runs_live_group_idx", MINE[s])
            for s in ("queued", "scheduled", "running", "waiting")
        ),
        *(
            (data.RunFilter(state=s, group="mine"), "", "runs_finished_group_idx", 150)
            for s in ("succeeded", "failed", "canceled")
        ),
        (data.RunFilter(state="queued", queue="a", group="mine"), "", "runs_live_group_idx", 120),
    ],
)
def test_each_group_list_reads_its_index(
    behind: psycopg.Connection[Any],
    filt: data.RunFilter,
    section: str,
    index: str,
    mine: int,
) -> None:
    """Each group list's statement reads its group index under a generic plan (a prepared
    statement's): no sequential scan of runs, runs_pkey only to fetch the ids read; and
    about as many index entries as the group has runs in the list (a queue and a
    finished state filter the group's runs read), not the 14,000 others."""
    query, _ = data.runs_query(filt, section=section, group_index=True)
    params = {**FILTERS, **START, **filt.params(), "state": filt.state}
    scans = runs_scans(generic_plan(behind, query, params))
    read = {n["Index Name"] for n in scans if n.get("Index Name")}
    assert read - {"runs_pkey"} == {index}, scans
    for n in scans:
        assert n["Node Type"] != "Seq Scan", n
        if n.get("Index Name") == "runs_pkey":
            assert "= ANY" in n["Index Cond"] and "Filter" not in n, n
    counts = rows_read(behind, query, params)
    assert counts[index] <= mine + 10, counts
    assert counts.get("runs_pkey", 0) <= mine, counts


def test_a_limited_queue_group_reads_the_group_index_when_it_exists(
    web: TestClient, conn: psycopg.Connection[Any], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A group of a limited queue: through its queue's group indexes (runs_group_claim_idx,
    runs_group_order_idx) without the group's own, through runs_live_group_idx with it;
    the same runs either way."""
    conn.execute(
        "INSERT INTO pgqueue.queues (name, group_concurrency) VALUES ('crawl', 1);"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited) "
        "SELECT 't', 'crawl', 'g7', true FROM generate_series(1, 60);"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited) "
        "SELECT 't', 'crawl', 'g' || (i % 50 + 10), true FROM generate_series(1, 5000) i;"
        "ANALYZE pgqueue.runs"
    )
    filt = data.RunFilter(state="queued", queue="crawl", group="g7")
    params = {**FILTERS, **START, **filt.params(), "state": filt.state}
    lists = []
    limited = {"runs_group_claim_idx", "runs_group_order_idx"}
    for indexed, indexes in ((False, limited), (True, {"runs_live_group_idx"})):
        if indexed:
            search_index(dsn, capsys, "--by", "group")
        query, _ = data.runs_query(filt, flagged=True, group_index=indexed)
        read = rows_read(conn, query, params)
        # runs_claim_idx: the queue's priorities, one probe each
        assert set(read) - {"runs_pkey", "runs_claim_idx"} <= indexes, read
        assert sum(n for i, n in read.items() if i in indexes) in range(60, 60 + 10), read
        pages = pages_of(web, "state=queued&queue=crawl&group=g7", 25)
        lists.append([r["id"] for p in pages for r in p["runs"]])
    assert lists[0] == lists[1] and len(lists[0]) == 60
