""" "Why" without gaps (issue 43): running runs whose worker died, positions and start
times in a rate-limited queue, rate limits in the Limits column, cancel reasons in lists."""

from __future__ import annotations

import datetime
import re
from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")

from fastapi.testclient import TestClient

import pgqueue
from tests.dashboard.test_routes import enqueue, live_worker, why


def expired(conn: psycopg.Connection[Any], queue: str) -> int:
    return enqueue(
        conn,
        queue=queue,
        state="running",
        attempt=1,
        worker_id="00000000-0000-0000-0000-0000000000dd",
        lease_token="00000000-0000-0000-0000-000000000002",
        lease_expires_at="2026-01-01 00:00:00+00",
        started_at="now",
    )


def test_a_running_run_whose_worker_died_says_so(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    orphan = expired(conn, "mail")
    reasons = why(web, orphan)
    assert re.match(r"lease expired .* ago: its worker stopped renewing it", reasons[0])
    assert reasons[1] == "no live worker serves queue mail: nobody rescues it until one starts"
    listed = web.get("/api/runs?state=running").json()["runs"]
    assert listed[0]["why"][1:] == reasons[1:] and "lease expired" in listed[0]["why"][0]
    live_worker(conn, ["mail"])
    assert "a live worker serving queue mail rescues it" in why(web, orphan)[1]
    page = web.get(f"/runs/{orphan}").text
    assert re.search(r'class="error">expired .* ago\)', page)
    overview = web.get("/").text
    assert "(1 lease expired)" in overview
    assert web.get("/api/queues").json()["queues"][0]["lease_expired"] == 1


def test_positions_and_starts_in_a_rate_limited_queue(
    web: TestClient, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    """The run 20 places back no longer gets the first one's next start: at 10/m its
    start is two minutes later."""
    live_worker(conn, ["api"], concurrency=50)
    app.set_limits("api", concurrency=None, group_concurrency=None, rate_limit="10/m")
    ids = [enqueue(conn, queue="api", limited=True) for _ in range(30)]
    conn.execute(
        "SELECT id FROM pgqueue.claim_limited('api', %s, 10, 30)",
        ("00000000-0000-0000-0000-0000000000aa",),
    )
    queued = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM pgqueue.runs WHERE state = 'queued' ORDER BY id"
        ).fetchall()
    ]
    assert len(queued) == 20
    first, last = why(web, queued[0]), why(web, queued[-1])
    assert first[0].startswith("queue rate limit 10/m reached")
    assert not any("ahead" in r for r in first)
    (position,) = [r for r in last if "ahead" in r]
    assert position.startswith("19 runs ahead of it in queue api: at 10/m, its start comes at")
    # a time of today is written to the second; past midnight UTC, with its date, to the
    # minute
    start_first = re.search(r"next start at ((?:\d{4}-\d\d-\d\d )?\d\d:\d\d(?::\d\d)?)", first[0])
    start_last = re.search(r"comes at about ((?:\d{4}-\d\d-\d\d )?\d\d:\d\d(?::\d\d)?)", position)
    assert start_first and start_last, (first, position)
    if " " not in start_first[1] + start_last[1]:  # both today, to the second
        gap = clock_seconds(start_last[1]) - clock_seconds(start_first[1])
        assert gap % 86400 == 60, (start_first[1], start_last[1])
    elif " " in start_first[1] and " " in start_last[1]:  # both dated, to the minute
        gap = clock_seconds(start_last[1]) - clock_seconds(start_first[1])
        assert 0 <= gap <= 120, (start_first[1], start_last[1])
    assert ids
    row = next(q for q in web.get("/api/queues").json()["queues"] if q["queue"] == "api")
    assert row["limits"] == ["10/m (10 used)"]
    assert "10/m (10 used)" in web.get("/").text


def test_lists_show_cancel_reasons(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, state="canceled", finished_at="now", cancel_reason="customer asked")
    page = web.get("/runs?state=canceled").text
    assert "canceled: customer asked" in page
    assert web.get("/api/runs?state=canceled").json()["runs"][0]["cancel_reason"] == (
        "customer asked"
    )


def test_a_run_deep_in_the_backlog_gets_an_estimated_position(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    """Exact up to 1,000 runs ahead, then the planner's estimate, said to be one (it was
    "1,000+" for every run beyond)."""
    live_worker(conn, ["deep"])
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue) SELECT 't', 'deep' FROM generate_series(1, 5000);"
        "ANALYZE pgqueue.runs"
    )
    ids = [r[0] for r in conn.execute("SELECT id FROM pgqueue.runs ORDER BY id").fetchall()]
    assert why(web, ids[10]) == ["10 runs ahead of it in queue deep"]
    (deep,) = why(web, ids[4000])
    found = re.fullmatch(
        r"about ([\d,]+) runs ahead of it in queue deep \(the planner's estimate\)", deep
    )
    assert found, deep
    assert 3000 <= int(found[1].replace(",", "")) <= 5000


def test_positions_in_a_limited_queue_are_within_the_group(
    web: TestClient, app: pgqueue.App, conn: psycopg.Connection[Any]
) -> None:
    live_worker(conn, ["crawl"], concurrency=50)
    app.set_limits("crawl", concurrency=None, group_concurrency=1)
    ids = [enqueue(conn, queue="crawl", group_key=f"t{i % 2}", limited=True) for i in range(9)]
    assert why(web, ids[0]) == ["next in line: a worker claims it at its next claim"]
    assert why(web, ids[6]) == [
        "3 runs of group t0 ahead of it (queue crawl takes its groups' runs in turns, each "
        "group's in order)"
    ]
    assert "1 run of group t1 ahead" in why(web, ids[3])[0]
    app.set_group_weights("crawl", {"t0": 3})
    assert why(web, ids[6]) == [
        "3 runs of group t0 ahead of it (queue crawl shares its starts between groups by "
        "weight, each group's in order)"
    ]


def test_the_overview_shows_group_weights(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO pgqueue.queues (name, concurrency, group_weights, default_group_weight)"
        """ VALUES ('api', 6, '{"gold": 3, "silver": 2}', 1)"""
    )
    row = next(q for q in web.get("/api/queues").json()["queues"] if q["queue"] == "api")
    assert row["limits"] == ["6 at once", "group weights gold 3, silver 2 (others 1)"]
    assert "group weights gold 3, silver 2 (others 1)" in web.get("/").text
    page = web.get("/queues/api").text
    assert "gold 3, silver 2" in page and "group weights (others 1)" in page


def clock_seconds(text: str) -> int:
    """Seconds since 2000-01-01 of "[YYYY-MM-DD ]HH:MM[:SS]" (today when there is no date)."""
    day, _, clock = text.rpartition(" ")
    when = datetime.date.fromisoformat(day) if day else datetime.date(2000, 1, 1)
    h, m, *sec = map(int, clock.split(":"))
    days = (when - datetime.date(2000, 1, 1)).days
    return days * 86400 + h * 3600 + m * 60 + (sec[0] if sec else 0)
