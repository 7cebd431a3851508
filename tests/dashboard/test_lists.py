"""Lists of runs right at scale (issue 43): a filter by queue or task reads an index keyed
by it, so that every run read matches and pages are full at any depth; counts per filter
(exact when small, else the planner's estimate, said to be one); "go to run"."""

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
from tests.cli.helpers import assert_user_error, cli
from tests.dashboard.test_data import FILTERS, START, assert_reads, plan_nodes, rows_read


@pytest.fixture
def deep(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """30,000 queued runs of 'bulk' and, older than all of them, 300 of 'rare'; 60,000
    finished runs of task 'common' and, finished before all of them, 300 of 'old' (a
    third failed) in queue 'q', the others in four queues; 5,000 scheduled runs of 'later'
    and 50 of 'few'. With the task's indexes (`pgqueue runs search-index --by task`)."""
    search_indexes.build(conn, "task")
    conn.execute("""
        INSERT INTO pgqueue.runs (task, queue, priority)
        SELECT 'r', 'rare', i % 3 FROM generate_series(1, 300) i;
        INSERT INTO pgqueue.runs (task, queue) SELECT 't', 'bulk' FROM generate_series(1, 30000);
        INSERT INTO pgqueue.runs (task, queue, state, finished_at, error)
        SELECT 'old', 'q', CASE WHEN i % 3 = 0 THEN 'failed' ELSE 'succeeded' END,
               now() - interval '1 day' - i * interval '1 s', 'KeyError: x'
        FROM generate_series(1, 300) i;
        INSERT INTO pgqueue.runs (task, queue, state, finished_at)
        SELECT 'common', (ARRAY['a', 'b', 'c', 'd'])[1 + i % 4], 'succeeded',
               now() - i * interval '1 ms'
        FROM generate_series(1, 60000) i;
        INSERT INTO pgqueue.runs (task, queue, state, run_at)
        SELECT 'r', 'few', 'scheduled', now() + interval '1 hour' FROM generate_series(1, 50);
        INSERT INTO pgqueue.runs (task, queue, state, run_at)
        SELECT 'r', 'later', 'scheduled', now() + interval '1 hour'
        FROM generate_series(1, 5000);
        ANALYZE pgqueue.runs;
    """)
    return conn


def all_pages(web: TestClient, query: str) -> list[list[dict[str, Any]]]:
    pages = []
    cursor = ""
    while True:
        resp = web.get(f"/api/runs?{query}&limit=100{cursor}")
        assert resp.status_code == 200, resp.text
        body = resp.json()
        if body["runs"] or not pages:  # a full page may be followed by an empty one
            pages.append(body["runs"])
        if not body["next"]:
            return pages
        cursor = "&" + urllib.parse.urlencode({"cursor": body["next"]})


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("state=queued&queue=rare", 300),
        ("state=succeeded&task=old", 200),
        ("state=failed&task=old", 100),
        ("state=succeeded&queue=q&task=old", 200),
        ("state=scheduled&queue=few", 50),
        ("state=queued&task=r", 300),
        ("state=queued&queue=rare&task=r", 300),
    ],
)
def test_a_filtered_list_is_full_at_any_depth(
    web: TestClient, deep: psycopg.Connection[Any], query: str, expected: int
) -> None:
    """The issue's 90,003 queued runs of one queue showed 3, then empty pages: now every
    page is full but the last, and the pages hold every match once, newest first."""
    pages = all_pages(web, query)
    assert [len(p) for p in pages[:-1]] == [100] * (len(pages) - 1)
    assert pages[-1]
    runs = [r for p in pages for r in p]
    assert len(runs) == expected
    assert len({r["id"] for r in runs}) == expected
    finished = any(f"state={s}" in query for s in ("succeeded", "failed", "canceled"))
    key = "finished_at" if finished else "id"
    order = [r[key] for r in runs]
    assert order == sorted(order, reverse=True)


def test_filtered_lists_read_their_index(deep: psycopg.Connection[Any]) -> None:
    conn = deep
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, run_at) SELECT 'once', 'later',"
        " 'scheduled', now() + interval '1 hour' FROM generate_series(1, 20); ANALYZE pgqueue.runs"
    )
    page = {**FILTERS, **START}
    cases = [
        (data.RunFilter(state="queued", queue="rare"), "runs_claim_idx"),
        (data.RunFilter(state="scheduled", queue="few"), "runs_scheduled_idx"),
        (data.RunFilter(state="running", queue="few"), "runs_lease_idx"),
        (data.RunFilter(state="waiting", queue="few"), "runs_wait_deadline_idx"),
        (data.RunFilter(state="succeeded", task="old"), "runs_finished_task_idx"),
        (data.RunFilter(state="failed", task="old"), "runs_finished_task_idx"),
        (data.RunFilter(state="canceled", queue="q"), "runs_finished_queue_idx"),
        (data.RunFilter(state="failed", queue="q"), "runs_finished_queue_idx"),
        (data.RunFilter(state="queued", task="r"), "runs_live_task_idx"),
        (data.RunFilter(state="scheduled", task="once"), "runs_live_task_idx"),
        (data.RunFilter(state="scheduled", queue="later", task="once"), "runs_live_task_idx"),
    ]
    for filt, index in cases:
        query, _ = data.runs_query(filt, task_index=True)
        assert_reads(conn, query, {**page, **filt.params()}, index)
    # the rare queue's 300 runs, behind 30,000 of another: read as 300 index entries
    query, _ = data.runs_query(data.RunFilter(state="queued", queue="rare"))
    read = rows_read(conn, query, {**page, "queue": "rare"})
    assert read["runs_claim_idx"] <= 300 + 10, read
    # one task's 300 queued runs, behind 30,000 of another task: 300 entries of
    # runs_live_task_idx
    query, _ = data.runs_query(data.RunFilter(state="queued", task="r"), task_index=True)
    read = rows_read(conn, query, {**page, "task": "r"})
    assert read["runs_live_task_idx"] <= 300 + 10, read


def test_counts_are_exact_when_small_and_estimates_otherwise(
    web: TestClient, deep: psycopg.Connection[Any]
) -> None:
    small = web.get("/api/runs/count?state=queued&queue=rare").json()
    assert small == {"count": 300, "exact": True}
    by_task = web.get("/api/runs/count?state=queued&task=r").json()
    assert by_task == {"count": 300, "exact": True}  # runs_live_task_idx
    query = data.states_query("dashboard_count", states=("queued",))
    params = {"queue": None, "task": "r", "group": None, "cap": data.EXACT_UP_TO + 1}
    assert_reads(deep, query, params, "runs_live_task_idx")
    big = web.get("/api/runs/count?state=succeeded&task=common").json()
    assert big["exact"] is False
    assert 30_000 <= big["count"] <= 120_000
    page = web.get("/runs?state=succeeded&task=common").text
    assert "about" in page and "estimate" in page
    assert "300 runs match" in web.get("/runs?state=queued&queue=rare").text


def test_go_to_run(web: TestClient, deep: psycopg.Connection[Any]) -> None:
    first = deep.execute("SELECT min(id) FROM pgqueue.runs").fetchone()
    assert first is not None
    resp = web.get(f"/go?run={first[0]}", follow_redirects=False)
    assert resp.status_code == 303 and resp.headers["location"] == f"/runs/{first[0]}"
    # a search for an existing run's id, however old, opens it
    resp = web.get(f"/runs?q={first[0]}", follow_redirects=False)
    assert resp.status_code == 303 and resp.headers["location"] == f"/runs/{first[0]}"
    assert web.get("/go?run=999999999").status_code == 404
    assert web.get("/go?run=abc").status_code == 400


def test_pickers_offer_queues_and_tasks(web: TestClient, deep: psycopg.Connection[Any]) -> None:
    deep.execute(
        "INSERT INTO pgqueue.queues (name) VALUES ('rare');"
        "INSERT INTO pgqueue.workers (id, host, pid, queues, concurrency, version, tasks) "
        "VALUES (gen_random_uuid(), 'h', 1, '{rare}', 1, 'test', '{old}')"
    )
    page = web.get("/runs").text
    assert '<datalist id="queues">' in page and '<option value="rare">' in page
    assert '<datalist id="tasks">' in page and '<option value="old">' in page


def search_index(dsn: str, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = cli(capsys, "runs", "search-index", "--dsn", dsn, *args)
    assert code == 0, (out, err)
    return out


@pytest.mark.parametrize("indexed", [False, True], ids=["bounded", "runs_args_idx"])
def test_search_by_argument_values(
    web: TestClient,
    conn: psycopg.Connection[Any],
    dsn: str,
    capsys: pytest.CaptureFixture[str],
    indexed: bool,
) -> None:
    """The same matches whether the filter reads runs_args_idx or a bounded scan."""
    if indexed:
        assert "ready" in search_index(dsn, capsys)
        assert search_indexes.ready(conn, "arguments")
    conn.execute(
        "INSERT INTO pgqueue.runs (task, args, kwargs) VALUES "
        '(\'pay\', \'[7, "eur"]\', \'{"user_id": 42, "plan": "pro"}\'), '
        "('pay', '[8, \"usd\"]', '{\"user_id\": 43}'), "
        "('pay', '[]', '{\"user_id\": 42}'), "
        "('ship', '[{\"user_id\": 44}]', '{}')"
    )

    def found(arg: str, state: str = "queued") -> int:
        resp = web.get("/api/runs", params={"arg": arg, "state": state})
        assert resp.status_code == 200, resp.text
        return len(resp.json()["runs"])

    assert found('{"user_id": 42}') == 2
    assert found('{"user_id": 42, "plan": "pro"}') == 1
    assert found("7") == 1 and found('"usd"') == 1 and found("[8]") == 1
    assert found("9") == 0
    assert found('{"user_id": 44}') == 1  # a positional object holds it
    assert found('[{"user_id": 44}]') == 1
    assert found('{"user_id": 42}', state="succeeded") == 0
    assert web.get("/api/runs", params={"arg": "{nope"}).status_code == 400
    page = web.get("/runs", params={"arg": '{"user_id": 43}'}).text
    assert page.count("<tr data-run=") == 1


def test_a_group_of_a_limited_queue_is_listed_from_its_index(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    """The queued runs of one group, behind 20,000 of other groups of the same queue, come
    at once, through runs_group_claim_idx."""
    conn.execute(
        "INSERT INTO pgqueue.queues (name, group_concurrency) VALUES ('crawl', 1);"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited, priority) "
        "SELECT 't', 'crawl', 'g7', true, i % 2 FROM generate_series(1, 150) i;"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited, priority) "
        "SELECT 't', 'crawl', 'g' || (i % 50 + 10), true, i % 2 FROM generate_series(1, 20000) i;"
        "ANALYZE pgqueue.runs"
    )
    pages = all_pages(web, "state=queued&queue=crawl&group=g7")
    runs = [r for p in pages for r in p]
    assert len(runs) == 150 and {r["group_key"] for r in runs} == {"g7"}
    assert [len(p) for p in pages[:-1]] == [100] * (len(pages) - 1)
    filt = data.RunFilter(state="queued", queue="crawl", group="g7")
    query, _ = data.runs_query(filt, flagged=True)
    params = {**FILTERS, **START, **filt.params()}
    assert_reads(conn, query, params, "runs_group_claim_idx")
    read = rows_read(conn, query, params)
    assert read["runs_group_claim_idx"] <= 150 + 10, read


def test_a_group_of_a_limited_queue_is_listed_in_any_unfinished_state(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    """One group's scheduled runs of a limited queue, behind 20,000 queued runs of other
    groups, come at once, through runs_group_order_idx (queue, group_key, id): the state
    applies to the group's unfinished runs only."""
    conn.execute(
        "INSERT INTO pgqueue.queues (name, group_concurrency) VALUES ('crawl', 1);"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited, state, run_at) "
        "SELECT 't', 'crawl', 'g7', true, 'scheduled', now() + interval '1 hour'"
        " FROM generate_series(1, 150) i;"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited) "
        "SELECT 't', 'crawl', 'g7', true FROM generate_series(1, 30);"
        "INSERT INTO pgqueue.runs (task, queue, group_key, limited, state, run_at) "
        "SELECT 't', 'crawl', 'g' || (i % 50 + 10), true, 'scheduled', now() + interval '1 hour'"
        " FROM generate_series(1, 20000) i;"
        "ANALYZE pgqueue.runs"
    )
    pages = all_pages(web, "state=scheduled&queue=crawl&group=g7")
    runs = [r for p in pages for r in p]
    assert len(runs) == 150 and {(r["group_key"], r["state"]) for r in runs} == {
        ("g7", "scheduled")
    }
    assert [len(p) for p in pages[:-1]] == [100] * (len(pages) - 1)
    filt = data.RunFilter(state="scheduled", queue="crawl", group="g7")
    query, _ = data.runs_query(filt, flagged=True)
    params = {**FILTERS, **START, **filt.params(), "state": "scheduled"}
    assert_reads(conn, query, params, "runs_group_order_idx")
    read = rows_read(conn, query, params)
    assert read["runs_group_order_idx"] <= 180 + 10, read


@pytest.mark.parametrize(
    ("filt", "index", "bounded"),
    [
        (data.RunFilter(arg='{"user_id": 42}'), "runs_pkey", "runs_pkey"),
        (data.RunFilter(q="nothing like it"), "runs_pkey", "runs_pkey"),
        (data.RunFilter(group="g1"), "runs_pkey", "runs_pkey"),
        (data.RunFilter(state="queued", queue="bulk", group="g1"), "runs_claim_idx", "runs_pkey"),
        (
            data.RunFilter(state="scheduled", queue="later", group="g1"),
            "runs_scheduled_idx",
            "runs_pkey",
        ),
        (
            data.RunFilter(state="succeeded", task="old", arg="[1]"),
            "runs_finished_queue_idx",
            "runs_pkey",
        ),
    ],
)
def test_the_bounded_filters_read_at_most_a_scan_a_page(
    deep: psycopg.Connection[Any], filt: data.RunFilter, index: str, bounded: str
) -> None:
    """The filters no index is keyed by (an argument, the search box, no state and no
    queue or task, a group where no limits apply) read the list's index and at most SCAN
    runs a page, however rarely they match: short pages with a cursor, never a slow one
    (docs/dashboard.md).
    (A list of one state and queue reads that state's ids of the queue from its index,
    which is not in id order, and fetches the newest SCAN of them.)"""
    query, _ = data.runs_query(filt)
    params = {**FILTERS, **START, **filt.params(), "state": filt.state}
    assert_reads(deep, query, params, index)
    read = rows_read(deep, query, params)
    assert read[bounded] <= data.SCAN + 10, read
    # the finished runs of every queue: at most SCAN keys of each of the five queues from
    # the index alone (and a probe per queue to find them), SCAN runs fetched by id
    assert read.get("runs_finished_queue_idx", 0) <= 5 * (data.SCAN + 2), read


def test_an_indexed_argument_filter_is_full_at_any_depth(
    web: TestClient,
    conn: psycopg.Connection[Any],
    dsn: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With runs_args_idx, the 250 runs of one customer, older than 60,000 others, come
    in full pages, each read from the index (the bounded filter finds none of them in its
    first pages); without it, the filter reads at most SCAN runs a page."""
    conn.execute("""
        INSERT INTO pgqueue.runs (task, queue, state, kwargs, finished_at)
        SELECT 'bill', 'q', 'succeeded', jsonb_build_object('customer', i % 4),
               now() - interval '2 days'
        FROM generate_series(1, 1000) i;
        INSERT INTO pgqueue.runs (task, queue, state, kwargs, finished_at)
        SELECT 'common', 'q', 'succeeded', jsonb_build_object('n', i), now()
        FROM generate_series(1, 60000) i;
        ANALYZE pgqueue.runs;
    """)
    query = "arg=" + urllib.parse.quote('{"customer": 3}')
    first = web.get(f"/api/runs?{query}&limit=100").json()
    assert first["runs"] == [] and first["scanned"] == data.SCAN
    assert "ready" in search_index(dsn, capsys)
    conn.execute("ANALYZE pgqueue.runs")
    pages = all_pages(web, query)
    assert [len(p) for p in pages] == [100, 100, 50]
    ids = [r["id"] for p in pages for r in p]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 250
    assert max(ids) <= 1000 and all(i % 4 == 3 for i in ids)
    # the statement reads the index, under the custom plan it is run with
    statement = data.states_query("dashboard_runs_by_arg", states=data.STATES)
    params = {**FILTERS, **START, "arg": '{"customer": 3}', "limit": 100}
    row = conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement, params).fetchone()
    assert row is not None
    nodes = plan_nodes(row[0])
    read = {n["Index Name"]: n["Actual Rows"] for n in nodes if n.get("Index Name")}
    assert "runs_args_idx" in read, nodes
    assert not [n for n in nodes if n.get("Node Type") == "Seq Scan"]
    assert "dropped" in search_index(dsn, capsys, "--drop")
    assert not search_indexes.ready(conn, "arguments")
    assert web.get(f"/api/runs?{query}&limit=100").json()["runs"] == []


def test_search_index_needs_a_schema(
    capsys: pytest.CaptureFixture[str], conn: psycopg.Connection[Any], dsn: str
) -> None:
    conn.execute("DROP SCHEMA pgqueue CASCADE")
    assert_user_error(cli(capsys, "runs", "search-index", "--dsn", dsn), "pgqueue migrate")


def test_a_task_list_without_its_index_is_bounded_and_right(
    web: TestClient, deep: psycopg.Connection[Any], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the task's indexes (migrations 0032 and 0033 drop the ones 0024 and 0026
    built), one task's unfinished runs are kept from the state's own index and its
    finished ones from the finished runs', at most SCAN read a page: the pages hold every
    match once, newest first, and the count is an estimate; `pgqueue runs search-index
    --by task` makes them exact again."""
    dropped = search_index(dsn, capsys, "--by", "task", "--drop")
    assert "dropped pgqueue.runs_live_task_idx and pgqueue.runs_finished_task_idx" in dropped
    assert not search_indexes.ready(deep, "task")
    lengths = {"state=queued&task=r": 300, "state=scheduled&queue=later&task=r": 5000}
    for query, n in {**lengths, "state=failed&task=old": 100}.items():
        runs = [r for p in all_pages(web, query) for r in p]
        assert len(runs) == n, query
        key = "finished_at" if "failed" in query else "id"
        order = [r[key] for r in runs]
        assert order == sorted(order, reverse=True) and len({r["id"] for r in runs}) == n
    statement, _ = data.runs_query(data.RunFilter(state="queued", task="r"))
    read = rows_read(deep, statement, {**FILTERS, **START, "task": "r"})
    assert "runs_live_task_idx" not in read and read["runs_pkey"] <= data.SCAN + 10, read
    statement, _ = data.runs_query(data.RunFilter(state="failed", task="old"))
    read = rows_read(deep, statement, {**FILTERS, **START, "task": "old"})
    assert "runs_finished_task_idx" not in read and read["runs_failed_idx"] <= data.SCAN + 10
    for state, n in (("queued", 300), ("failed", 100)):
        url = f"/api/runs/count?state={state}&task={'r' if state == 'queued' else 'old'}"
        assert web.get(url).json()["exact"] is False
        assert "ready" in search_index(dsn, capsys, "--by", "task")
        assert search_indexes.ready(deep, "task")
        assert web.get(url).json() == {"count": n, "exact": True}
        search_index(dsn, capsys, "--by", "task", "--drop")
