"""Totals by state per queue, succeeded and failed included, from the workers' tally
(pgqueue.finished_totals) and never a count of the history; the Failures page (issue 43)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")

from fastapi.testclient import TestClient

from pgqueue.db import sql as _sql
from pgqueue.ops.retention import fold_tally
from tests.dashboard.test_confirm import post_form
from tests.dashboard.test_data import assert_reads, big, plan, reads  # noqa: F401  (big: a fixture)


def finish(conn: psycopg.Connection[Any], n: int, queue: str, state: str, **kw: Any) -> None:
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, started_at, finished_at, error) "
        "SELECT %(task)s, %(queue)s, %(state)s, now() - %(ago)s::interval - interval '1 s', "
        "       now() - %(ago)s::interval, %(error)s "
        "FROM generate_series(1, %(n)s)",
        {
            "n": n,
            "queue": queue,
            "state": state,
            "task": kw.get("task", "t"),
            "ago": kw.get("ago", "10 minutes"),
            "error": kw.get("error"),
        },
    )


def bulk(web: TestClient, **fields: str) -> int:
    """The status of a confirmed bulk action (`fields`: the action and the runs' filters),
    posted as the confirm page's form does."""
    return int(post_form(web, "/api/runs/bulk", confirmed="yes", **fields).status_code)


def totals(web: TestClient) -> dict[str, dict[str, int]]:
    body = web.get("/api/queues").json()
    return {
        q["queue"]: {s: q[f"{s}_total"] for s in ("succeeded", "failed", "canceled")}
        for q in body["queues"]
    }


def test_totals_by_state_come_from_the_tally(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    finish(conn, 30, "mail", "succeeded")
    finish(conn, 7, "mail", "failed", error="ValueError: x")
    finish(conn, 2, "mail", "canceled")
    conn.execute("INSERT INTO pgqueue.queues (name) VALUES ('mail')")
    expected = {"succeeded": 30, "failed": 7, "canceled": 2}
    # before the tally folds them: read after its mark
    assert totals(web)["mail"] == expected
    fold_tally(conn)
    stored = dict(
        conn.execute("SELECT state, n FROM pgqueue.finished_totals WHERE queue = 'mail'").fetchall()
    )
    assert stored == expected
    fold_tally(conn)  # folding again adds nothing
    assert totals(web)["mail"] == expected
    # a run that finishes after the tally's mark is counted at once, and once
    finish(conn, 1, "mail", "failed", ago="0 s", error="KeyError: k")
    assert totals(web)["mail"]["failed"] == 8
    body = web.get("/api/queues").json()
    assert body["totals"] == {"succeeded": 30, "failed": 8, "canceled": 2}
    page = web.get("/").text
    assert "succeeded, all time" in page and "failed, all time" in page


def test_failures_are_grouped_by_task_and_error_class(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    finish(conn, 5, "mail", "failed", task="send", error="SMTPError: 421 try later")
    finish(conn, 3, "mail", "failed", task="send", error="ValueError: bad address\nmore")
    finish(conn, 2, "crawl", "failed", task="fetch", error="SMTPError: x", ago="2 hours")
    finish(conn, 4, "mail", "succeeded", task="send")
    groups = web.get("/api/failures").json()["groups"]
    got = [(g["task"], g["error_class"], g["n"], g["queues"]) for g in groups]
    assert got == [
        ("send", "SMTPError", 5, ["mail"]),
        ("send", "ValueError", 3, ["mail"]),
        ("fetch", "SMTPError", 2, ["crawl"]),
    ]
    assert groups[2]["first_seen"] <= groups[2]["last_seen"]
    page = web.get("/failures").text
    link = "/confirm?action=retry&amp;state=failed&amp;task=send&amp;error_class=SMTPError"
    assert link in page
    # a group's runs, listed and retried: exactly those of its task and error class
    listed = web.get("/api/runs?state=failed&task=send&error_class=ValueError").json()["runs"]
    assert len(listed) == 3
    asked = web.get(link.replace("&amp;", "&"))
    assert '<strong id="confirm-count">5</strong>' in asked.text
    assert bulk(web, action="retry", state="failed", task="send", error_class="SMTPError") == 303
    left = conn.execute(
        "SELECT task, count(*) FROM pgqueue.runs WHERE state = 'failed' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert left == [("fetch", 2), ("send", 3)]


def test_a_failure_group_cancels_its_runs_waiting_to_retry(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    """Cancel retrying: the unfinished runs of the task whose last attempt failed with the
    group's error class, and no other run (finished, another error, another task)."""
    finish(conn, 2, "mail", "failed", task="send", error="SMTPError: 421")
    conn.execute(
        "INSERT INTO pgqueue.runs (task, queue, state, attempt, run_at, error) VALUES"
        " ('send', 'mail', 'scheduled', 1, now() + interval '1 hour', 'SMTPError: 421'),"
        " ('send', 'mail', 'queued', 2, now(), 'SMTPError: 450'),"
        " ('send', 'mail', 'scheduled', 1, now() + interval '1 hour', 'ValueError: x'),"
        " ('fetch', 'mail', 'scheduled', 1, now() + interval '1 hour', 'SMTPError: 421'),"
        " ('send', 'mail', 'queued', 0, now(), NULL)"
    )
    page = web.get("/failures").text
    link = "/confirm?action=cancel&amp;task=send&amp;error_class=SMTPError"
    assert link in page
    asked = web.get(link.replace("&amp;", "&"))
    assert '<strong id="confirm-count">2</strong>' in asked.text, asked.text
    assert bulk(web, action="cancel", task="send", error_class="SMTPError") == 303
    states = conn.execute(
        "SELECT task, state, coalesce(split_part(error, ':', 1), '-') FROM pgqueue.runs ORDER BY id"
    ).fetchall()
    assert states == [
        ("send", "failed", "SMTPError"),
        ("send", "failed", "SMTPError"),
        ("send", "canceled", "SMTPError"),
        ("send", "canceled", "SMTPError"),
        ("send", "scheduled", "ValueError"),
        ("fetch", "scheduled", "SMTPError"),
        ("send", "queued", "-"),
    ]


def test_totals_and_failures_read_indexes(big: psycopg.Connection[Any]) -> None:  # noqa: F811
    """And the other new statements of the overview, the run page and the lists."""
    assert_reads(big, _sql.query("dashboard_totals"), {}, "runs_finished_queue_idx")
    # by id, or (PostgreSQL 18's choice) the partial index of running runs' leases: both
    # read a handful of entries
    indexes, full = reads(plan(big, _sql.query("dashboard_stale"), {"ids": [1, 2]}))
    assert not full and indexes & {"runs_pkey", "runs_lease_idx"}, (full, indexes)
    assert_reads(big, _sql.query("audit_run"), {"id": 1}, "audit_run_idx")
    assert_reads(big, _sql.query("dashboard_pickers"), {})
    crawl = big.execute(
        "SELECT array_agg(id) FROM (SELECT id FROM pgqueue.runs WHERE state = 'queued' "
        "AND queue = 'crawl' ORDER BY id DESC LIMIT 50) x"
    ).fetchone()
    assert crawl is not None
    assert_reads(
        big,
        _sql.query("dashboard_group_ahead"),
        {"ids": crawl[0]},
        "runs_group_claim_idx",
    )
    assert_reads(
        big, _sql.query("dashboard_failures"), {"scan": 20_000, "limit": 100}, "runs_failed_idx"
    )
