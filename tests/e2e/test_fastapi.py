"""The FastAPI example (examples/fastapi_app): the asyncio API behind real endpoints,
FastAPI's TestClient in this process, a real worker process."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx2")

from fastapi.testclient import TestClient

from tests.helpers import ROOT, WorkerProcess, scalar, wait_until
from tests.webapps import EXAMPLES

APP_DIR = EXAMPLES / "fastapi_app"


@pytest.fixture
def service(dsn: str) -> Iterator[tuple[Any, TestClient]]:
    if str(APP_DIR) not in sys.path:
        sys.path.insert(0, str(APP_DIR))
    import main

    main.tasks.configure(dsn=dsn)
    with TestClient(main.api) as client:
        yield main, client
    main.tasks.close()


def worker(dsn: str) -> WorkerProcess:
    env = {"PYTHONPATH": os.pathsep.join([str(APP_DIR), str(ROOT)])}
    return WorkerProcess(dsn, "main:tasks", "--concurrency", "4", env=env)


def test_signup_and_its_run_commit_together_and_a_worker_runs_it(
    dsn: str, service: tuple[Any, TestClient]
) -> None:
    _, client = service
    created = client.post("/signups", json={"email": "ann@example.com"})
    assert created.status_code == 201, created.text
    run_id = created.json()["run"]
    assert client.get(f"/runs/{run_id}").json()["state"] == "queued"
    duplicate = client.post("/signups", json={"email": "ann@example.com"})
    assert duplicate.status_code == 409  # the transaction rolled back: no second run
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.runs") == 1
    assert client.get("/runs/999999").status_code == 404

    with worker(dsn).wait_ready() as w:
        wait_until(
            lambda: client.get(f"/runs/{run_id}").json()["state"] == "succeeded",
            message="the welcome run to succeed",
        )
        assert client.get(f"/runs/{run_id}").json()["result"] == "welcomed ann@example.com"
        assert scalar(dsn, "SELECT welcomed FROM signups") is True
        # wait_async: the endpoint awaits the worker's result without blocking the loop.
        waited = client.post("/signups?wait=10", json={"email": "bob@example.com"})
        assert waited.json()["result"] == "welcomed bob@example.com", w.output()
