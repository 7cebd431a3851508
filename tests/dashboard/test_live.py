"""Live updates (issue 43): the overview, a queue's page and an unfinished run's page
each have a part the script fetches again, paced by X-Refresh-After so that an idle tab
costs the database at most 0.2 s a minute; a run's progress moves on its page."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

pytest.importorskip("starlette")

from fastapi.testclient import TestClient
from psycopg.types.json import Jsonb

from pgqueue.dashboard import routes
from tests.dashboard.test_routes import enqueue, running


def working(conn: psycopg.Connection[Any], queue: str) -> int:
    """A running run under a lease of an hour."""
    run_id = running(conn, queue)
    conn.execute(
        "UPDATE pgqueue.runs SET lease_expires_at = now() + interval '1 hour' WHERE id = %s",
        (run_id,),
    )
    return run_id


def test_refresh_is_paced_by_what_a_part_costs() -> None:
    assert routes.refresh_after(0.001, "overview") == 2
    assert routes.refresh_after(0.040, "overview") == 15  # 4 a minute: 0.16 s
    assert routes.refresh_after(0.040, "queue") == 15
    assert routes.refresh_after(0.001, "queue") == 5
    assert routes.refresh_after(10.0, "run") == routes.MOST_REFRESH
    for took in (0.001, 0.01, 0.05, 0.3):
        every = routes.refresh_after(took, "overview")
        assert took * 60 / every <= routes.REFRESH_BUDGET + 1e-9


def test_each_live_part_answers_with_its_pace(
    web: TestClient, conn: psycopg.Connection[Any]
) -> None:
    run_id = working(conn, "mail")
    done = enqueue(conn, state="succeeded", finished_at="now")
    for page, part in (
        ("/", "/parts/overview"),
        ("/queues/mail", "/parts/queues/mail"),
        (f"/runs/{run_id}", f"/parts/runs/{run_id}"),
    ):
        html = web.get(page)
        assert f'data-part="{part}"' in html.text, page
        resp = web.get(part)
        assert resp.status_code == 200 and int(resp.headers["x-refresh-after"]) >= 2
        assert "<html" not in resp.text  # the part alone
    # a finished run's page has nothing that changes: no live part to fetch
    assert "data-part=" not in web.get(f"/runs/{done}").text
    assert web.get("/parts/runs/999999").status_code == 404


def test_a_runs_progress_moves_on_its_page(web: TestClient, conn: psycopg.Connection[Any]) -> None:
    run_id = working(conn, "mail")
    for done in (10, 20):
        progress = {"done": done, "total": 100, "message": f"page {done}", "at": "now"}
        conn.execute(
            "UPDATE pgqueue.runs SET progress = %s WHERE id = %s", (Jsonb(progress), run_id)
        )
        assert f"page {done}" in web.get(f"/parts/runs/{run_id}").text
