"""The worker's /healthz (liveness) and /healthz/ready (readiness) on its metrics port."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import psycopg

import pgqueue
from pgqueue.worker.probes import Probes
from tests.helpers import InProcessWorker, free_port, wait_until


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_running_worker_is_live_and_ready_and_still_serves_metrics(app: pgqueue.App) -> None:
    port = free_port()
    with InProcessWorker(app, metrics_port=port):
        status, body = get(port, "/healthz")
        assert status == 200 and body["status"] == "ok", body
        assert body["heartbeat_age_seconds"] < 30 and body["loop_lag_seconds"] < 10
        status, body = get(port, "/healthz/ready")
        assert status == 200 and body["status"] == "ok", body
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert b"pgqueue_runs_started" in r.read()


def test_a_blocked_event_loop_fails_liveness(app: pgqueue.App) -> None:
    blocking, release = threading.Event(), threading.Event()

    @app.task(max_attempts=1)
    async def hog() -> None:
        blocking.set()
        deadline = time.monotonic() + 30
        while not release.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)  # blocks the loop, on purpose

    port = free_port()
    with InProcessWorker(app, metrics_port=port, lease_seconds=3, stage_interval=0.05):
        handle = hog.enqueue()
        assert blocking.wait(20)
        try:
            # the watchdog's limit is a third of the lease (1 s)
            _, body = wait_until(
                lambda: (r := get(port, "/healthz"))[0] == 503 and r,
                message="liveness to fail",
            )
            assert body["status"] == "unhealthy"
            assert body["problems"][0].startswith("the event loop has been blocked for ")
        finally:
            release.set()
        wait_until(lambda: get(port, "/healthz")[0] == 200, message="liveness to recover")
        handle.wait(timeout=20)


def test_a_heartbeat_that_cannot_be_written_fails_liveness(app: pgqueue.App) -> None:
    """The worker's row locked by another session: its lease keeper cannot renew the
    heartbeat, and once the lease has run out the worker is not live."""
    port = free_port()
    with InProcessWorker(app, metrics_port=port, lease_seconds=3) as worker:
        assert get(port, "/healthz")[0] == 200
        with psycopg.connect(app.dsn) as blocker:
            blocker.execute("SELECT 1 FROM pgqueue.workers WHERE id = %s FOR UPDATE", (worker.id,))
            _, body = wait_until(
                lambda: (r := get(port, "/healthz"))[0] == 503 and r,
                message="liveness to fail",
            )
            assert any(p.startswith("no heartbeat for ") for p in body["problems"]), body
            blocker.rollback()
        wait_until(lambda: get(port, "/healthz")[0] == 200, message="liveness to recover")


def test_readiness_answers_503_when_the_database_is_unreachable() -> None:
    probes = Probes()
    assert probes.readiness().status == 503  # not started yet
    assert probes.liveness().body == {"status": "starting"}
    probes.dsn = "postgresql://u:secret@127.0.0.1:1/x"
    probe = probes.readiness()
    assert probe.status == 503 and probe.body["status"] == "database unreachable"
    assert "secret" not in json.dumps(probe.body)
    assert probes.answer("/metrics") is None
