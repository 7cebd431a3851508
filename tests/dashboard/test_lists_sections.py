"""A list with a queue or a task and no state (issue 43): its unfinished runs newest
first, then its finished runs most recently finished first, each section read through an
index keyed by the queue or the task, so that the list is exact at any depth, however
many runs of other queues lie in front of it; the cursor names the section."""

from __future__ import annotations

import json
import re
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
from tests.helpers import plan_nodes

# The runs of queue 'mine' and task 'mine': enqueued first, finished first
MINE = {"queued": 120, "scheduled": 30, "running": 10, "waiting": 5, "finished": 150}
OTHERS = 3500  # runs of queue 'other' and task 'other' in each of four states, all newer


# Each alone: psycopg sends a statement with parameters as one prepared statement
FILL = [
    """
    INSERT INTO pgqueue.runs (task, queue, state, finished_at, error)
      SELECT 'mine', 'mine', (ARRAY['succeeded', 'failed', 'canceled'])[1 + i %% 3],
             now() - interval '1 day' - i * interval '1 s', 'KeyError: x'
      FROM generate_series(1, %(finished)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, priority)
      SELECT 'mine', 'mine', i %% 3 FROM generate_series(1, %(queued)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, state, run_at)
      SELECT 'mine', 'mine', 'scheduled', now() + interval '1 hour'
      FROM generate_series(1, %(scheduled)s)
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, state, lease_token, lease_expires_at)
      SELECT 'mine', 'mine', 'running', gen_random_uuid(), now() + interval '1 hour'
      FROM generate_series(1, %(running)s)
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, state, wait_event, wait_key, run_at)
      SELECT 'mine', 'mine', 'waiting', 'e', i::text, now() + interval '1 hour'
      FROM generate_series(1, %(waiting)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, priority)
      SELECT 'other', 'other', i %% 2 FROM generate_series(1, %(others)s) i
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, state, run_at)
      SELECT 'other', 'other', 'scheduled', now() + interval '1 hour'
      FROM generate_series(1, %(others)s)
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, state, lease_token, lease_expires_at)
      SELECT 'other', 'other', 'running', gen_random_uuid(), now() + interval '1 hour'
      FROM generate_series(1, %(others)s)
    """,
    """
    INSERT INTO pgqueue.runs (task, queue, state, finished_at)
      SELECT 'other', 'other', 'succeeded', now() - i * interval '1 ms'
      FROM generate_series(1, %(others)s) i
    """,
]


@pytest.fixture
def behind(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """The runs of MINE, then OTHERS runs of another queue and task queued, scheduled,
    running and finished after them, with the task's indexes (runs_live_task_idx,
    runs_finished_task_idx: `pgqueue runs search-index --by task`)."""
    search_indexes.build(conn, "task")
    params = {**MINE, "others": OTHERS}
    for statement in FILL:
        conn.execute(statement, params)
    conn.execute("ANALYZE pgqueue.runs")
    return conn


def expected(conn: psycopg.Connection[Any], column: str) -> list[int]:
    """The ids of the runs of queue or task 'mine': the unfinished newest first, then the
    finished most recently finished first (the list's order, by a plain SELECT)."""
    query = sql.SQL(
        "SELECT id FROM pgqueue.runs WHERE {col} = 'mine' AND finished_at IS NULL ORDER BY id DESC"
    ).format(col=sql.Identifier(column))
    unfinished = [r[0] for r in conn.execute(query)]
    query = sql.SQL(
        "SELECT id FROM pgqueue.runs WHERE {col} = 'mine' AND finished_at IS NOT NULL"
        " ORDER BY finished_at DESC, id DESC"
    ).format(col=sql.Identifier(column))
    finished = [r[0] for r in conn.execute(query)]
    assert len(unfinished) + len(finished) == sum(MINE.values())
    return unfinished + finished


def pages_of(web: TestClient, query: str, limit: int) -> list[dict[str, Any]]:
    pages = []
    cursor = ""
    while True:
        resp = web.get(f"/api/runs?{query}&limit={limit}{cursor}")
        assert resp.status_code == 200, resp.text
        pages.append(resp.json())
        if not pages[-1]["next"]:
            return pages
        assert len(pages) < 1000
        cursor = "&" + urllib.parse.urlencode({"cursor": pages[-1]["next"]})


@pytest.mark.parametrize("limit", [50, 7])
def test_a_queue_with_no_state_lists_every_run_unfinished_then_finished(
    web: TestClient,
    behind: psycopg.Connection[Any],
    limit: int,
) -> None:
    """The 315 runs of a queue, older than 14,000 runs of another, in full pages: every
    one once, unfinished newest first, then finished most recently finished first."""
    pages = pages_of(web, "queue=mine", limit)
    assert [len(p["runs"]) for p in pages[:-1]] == [limit] * (len(pages) - 1)
    ids = [r["id"] for p in pages for r in p["runs"]]
    assert ids == expected(behind, "queue")
    assert {r["queue"] for p in pages for r in p["runs"]} == {"mine"}
    cursors = [p["next"] for p in pages[:-1]]
    assert cursors[0].startswith("unfinished:") and cursors[-1].startswith("finished:")


@pytest.mark.parametrize("indexed", [True, False], ids=["runs_live_task_idx", "bounded"])
def test_a_task_with_no_state_lists_every_run_unfinished_then_finished(
    web: TestClient,
    behind: psycopg.Connection[Any],
    dsn: str,
    capsys: pytest.CaptureFixture[str],
    indexed: bool,
) -> None:
    """A task's runs likewise: with its indexes in full pages; without them each section
    reads at most SCAN runs of every task a page (short pages, every run once)."""
    if not indexed:
        search_index(dsn, capsys, "--by", "task", "--drop")
        assert not search_indexes.ready(behind, "task")
    pages = pages_of(web, "task=mine", 50)
    ids = [r["id"] for p in pages for r in p["runs"]]
    assert ids == expected(behind, "task")
    sizes = [len(p["runs"]) for p in pages[:-1]]
    if indexed:
        assert sizes == [50] * (len(pages) - 1)
    else:  # 10,500 newer unfinished runs of another task: read SCAN a page
        assert [p["scanned"] for p in pages[:5]] == [data.SCAN] * 5
        assert sizes[:5] == [0] * 5
        # then the finished section, as bounded: 3,500 newer finished runs of 'other'
        finished = [p for p in pages if p["next"] and p["next"].startswith("finished:")]
        assert finished and any(len(p["runs"]) < 50 for p in finished)
        assert all(p["scanned"] <= 2 * data.SCAN for p in pages)


def test_a_group_of_a_limited_queue_with_no_state(
    web: TestClient,
    conn: psycopg.Connection[Any],
) -> None:
    """One group's unfinished runs of a limited queue come through runs_group_order_idx,
    then the queue's finished runs of the group."""
    conn.execute(
        "INSERT INTO pgqueue.queues (name, group_concurrency) VALUES ('crawl', 1);"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited, state, finished_at) "
        "SELECT 't', 'crawl', 'g' || (i % 2 + 6), true, 'succeeded', now() - i * interval '1 s'"
        " FROM generate_series(1, 40) i;"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited) "
        "SELECT 't', 'crawl', 'g7', true FROM generate_series(1, 60);"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited) "
        "SELECT 't', 'crawl', 'g' || (i % 50 + 10), true FROM generate_series(1, 5000) i;"
        "ANALYZE pgqueue.runs"
    )
    pages = pages_of(web, "queue=crawl&group=g7", 25)
    runs = [r for p in pages for r in p["runs"]]
    assert [r["state"] for r in runs] == ["queued"] * 60 + ["succeeded"] * 20
    assert {r["group_key"] for r in runs} == {"g7"} and len({r["id"] for r in runs}) == 80
    assert [len(p["runs"]) for p in pages[:-1]] == [25] * (len(pages) - 1)
    filt = data.RunFilter(queue="crawl", group="g7")
    query, _ = data.runs_query(filt, flagged=True, section=data.UNFINISHED)
    read = rows_read(conn, query, {**FILTERS, **START, **filt.params()})
    assert read["runs_group_order_idx"] <= 60 + 10, read


def test_a_cursor_names_its_section(
    web: TestClient,
    behind: psycopg.Connection[Any],
) -> None:
    """A cursor of another kind (an id, as a list with no state took before it had
    sections) is refused with a message that says what to do; a section's cursor is
    refused by a list without sections."""
    for cursor in ("12345", "2026-01-01T00:00:00+00:00~5", "later:5", "unfinished:x"):
        resp = web.get("/api/runs", params={"queue": "mine", "cursor": cursor})
        assert resp.status_code == 400, (cursor, resp.text)
        assert "cursor" in resp.text
    text = web.get("/api/runs", params={"queue": "mine", "cursor": "12345"}).text
    assert "first page" in text
    resp = web.get("/api/runs", params={"state": "queued", "cursor": "unfinished:5"})
    assert resp.status_code == 400
    # the HTML list pages through the sections as the JSON one does
    page = web.get("/runs?queue=mine").text
    assert page.count("<tr data-run=") == data.PAGE_SIZE
    older = re.search(r'href="([^"]+)" id="next"', page)
    assert older is not None and "cursor=unfinished%3A" in older[1]


def generic_plan(conn: psycopg.Connection[Any], query: sql.Composable, params: Any) -> Any:
    """The generic plan of `query` (PREPARE, then EXPLAIN EXECUTE with force_generic_plan):
    the plan a prepared statement gets with its parameters unknown."""
    text = query.as_string(conn)
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m[1] not in names:
            names.append(m[1])
        return f"${names.index(m[1]) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, text)
    with conn.transaction():
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute(sql.SQL("PREPARE sectioned AS {}").format(sql.SQL(text)))
        values = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
        explain = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE sectioned ({})").format(values)
        row = conn.execute(explain).fetchone()
        conn.execute("DEALLOCATE sectioned")
    assert row is not None
    return row[0]


def runs_scans(plan: Any) -> list[dict[str, Any]]:
    return [n for n in plan_nodes(plan) if n.get("Relation Name") == "runs" or n.get("Index Name")]


@pytest.mark.parametrize(
    ("filt", "section", "indexes"),
    [
        (
            data.RunFilter(queue="mine"),
            data.UNFINISHED,
            {"runs_claim_idx", "runs_scheduled_idx", "runs_lease_idx", "runs_wait_deadline_idx"},
        ),
        (data.RunFilter(queue="mine"), data.FINISHED, {"runs_finished_queue_idx"}),
        (data.RunFilter(task="mine"), data.UNFINISHED, {"runs_live_task_idx"}),
        (data.RunFilter(task="mine"), data.FINISHED, {"runs_finished_task_idx"}),
    ],
)
def test_each_section_reads_its_index(
    behind: psycopg.Connection[Any], filt: data.RunFilter, section: str, indexes: set[str]
) -> None:
    """Each section's statement reads the indexes keyed by its queue or task, under a
    generic plan: no sequential scan of runs, and runs_pkey only to fetch the ids read
    (never walked to filter other queues' runs); and it reads about as many index entries
    as the queue or the task has runs in the section, not the 14,000 others."""
    query, _ = data.runs_query(filt, task_index=True, section=section)
    params = {**FILTERS, **START, **filt.params()}
    scans = runs_scans(generic_plan(behind, query, params))
    read = {n["Index Name"] for n in scans if n.get("Index Name")}
    assert read - {"runs_pkey"} == indexes, scans
    for n in scans:
        assert n["Node Type"] != "Seq Scan", n
        if n.get("Index Name") == "runs_pkey":
            assert "= ANY" in n["Index Cond"] and "Filter" not in n, n
    counts = rows_read(behind, query, params)
    mine = sum(MINE.values()) - MINE["finished"] if section == data.UNFINISHED else MINE["finished"]
    assert sum(v for k, v in counts.items() if k != "runs_pkey") <= mine + 10, counts
    assert counts.get("runs_pkey", 0) <= mine, counts


def test_the_bounded_unfinished_section_reads_the_states_indexes(
    behind: psycopg.Connection[Any], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without runs_live_task_idx, a task's unfinished section reads every queue's
    unfinished runs from their states' indexes, at most SCAN fetched a page."""
    search_index(dsn, capsys, "--by", "task", "--drop")
    filt = data.RunFilter(task="mine")
    query, _ = data.runs_query(filt, section=data.UNFINISHED)
    params = {**FILTERS, **START, **filt.params()}
    scans = runs_scans(generic_plan(behind, query, params))
    read = {n["Index Name"] for n in scans if n.get("Index Name")}
    live = {"runs_claim_idx", "runs_scheduled_idx", "runs_lease_idx", "runs_wait_deadline_idx"}
    assert read - {"runs_pkey"} <= live and "runs_claim_idx" in read, scans
    for n in scans:
        assert n["Node Type"] != "Seq Scan", n
        if n.get("Index Name") == "runs_pkey":
            assert "= ANY" in n["Index Cond"] and "Filter" not in n, n
    assert rows_read(behind, query, params)["runs_pkey"] <= data.SCAN


@pytest.mark.parametrize(
    ("filt", "index"),
    [
        (data.RunFilter(state="scheduled", queue="mine"), "runs_scheduled_idx"),
        (data.RunFilter(state="running", queue="mine"), "runs_lease_idx"),
        (data.RunFilter(state="scheduled"), "runs_scheduled_idx"),
        (data.RunFilter(state="queued", task="mine"), "runs_live_task_idx"),
        (data.RunFilter(state="scheduled", task="mine"), "runs_live_task_idx"),
        (data.RunFilter(state="succeeded", queue="mine"), "runs_finished_queue_idx"),
        (data.RunFilter(state="failed", task="mine"), "runs_finished_task_idx"),
    ],
)
def test_a_state_list_reads_its_index_under_a_generic_plan(
    behind: psycopg.Connection[Any], filt: data.RunFilter, index: str
) -> None:
    """The lists of one state read their index with the cursor unknown too (a prepared
    statement's generic plan), not runs_pkey's range from the cursor, nor the finished
    runs in finish order, filtering the queue's or the task's runs from all the others."""
    query, _ = data.runs_query(filt, task_index=True)
    params = {**FILTERS, **START, **filt.params(), "state": filt.state}
    scans = runs_scans(generic_plan(behind, query, params))
    assert index in {n.get("Index Name") for n in scans}, scans
    for n in scans:
        assert n["Node Type"] != "Seq Scan", n
        if n.get("Index Name") == "runs_pkey":
            assert "= ANY" in n["Index Cond"] and "Filter" not in n, n
    # not the finished runs of every queue in finish order (dashboard_runs_by_finish: a
    # loose scan of the queues, a Recursive Union), only the filtered queue's or task's
    assert "Recursive Union" not in json.dumps(generic_plan(behind, query, params))
