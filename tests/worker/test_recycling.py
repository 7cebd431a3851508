"""Recycling: `pgqueue worker --max-runs N --max-memory MB` drains and exits 0."""

from __future__ import annotations

import pytest

from pgqueue.worker import Worker
from tests.apps.recycle import app as recycle_app
from tests.apps.recycle import leak, noop
from tests.helpers import WorkerProcess, state_counts

APP = "tests.apps.recycle:app"


def test_max_runs_claims_exactly_n_then_exits_0(dsn: str) -> None:
    """Claims of 4 (concurrency 8, two claims in flight) never take more than the 5 left."""
    recycle_app.configure(dsn=dsn)
    noop.enqueue_many([(i,) for i in range(20)])
    with WorkerProcess(dsn, APP, "--max-runs", "5", "--concurrency", "8") as worker:
        assert worker.wait(30) == 0, worker.output()
        log = worker.output()
    assert state_counts(dsn) == {"succeeded": 5, "queued": 15}, log
    assert "5 runs claimed (max_runs): draining to exit" in log
    assert "stopped" in log


def test_max_memory_drains_a_leaking_worker_and_exits_0(dsn: str) -> None:
    recycle_app.configure(dsn=dsn)
    leak.enqueue_many([(40,) for _ in range(20)])
    with WorkerProcess(dsn, APP, "--max-memory", "200", "--concurrency", "1") as worker:
        assert worker.wait(60) == 0, worker.output()
        log = worker.output()
    done = state_counts(dsn)
    # every run it started finished (drained, not killed); most were left for a new one
    assert set(done) == {"succeeded", "queued"} and done["queued"] >= 10, (done, log)
    assert "over max_memory_mb 200: draining to exit" in log, log


@pytest.mark.parametrize(
    ("option", "value"), [("max_runs", 0), ("max_memory_mb", 0.0), ("max_memory_mb", -1.0)]
)
def test_recycling_limits_must_be_positive(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=option):
        Worker(recycle_app, **{option: value})
