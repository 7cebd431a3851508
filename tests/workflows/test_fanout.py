"""ctx.map (docs/flow_control.md): one child per item, a durable wait for all, results in order;
across a worker's restart."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgqueue
from tests.apps import batched as flow
from tests.apps.basic import EFFECTS_DDL
from tests.helpers import WorkerProcess, scalar, wait_until

APP = "tests.apps.batched:app"


@pytest.fixture
def app(dsn: str, conn: psycopg.Connection[Any]) -> Any:
    conn.execute(EFFECTS_DDL)
    flow.app.configure(dsn=dsn)
    yield flow.app
    flow.app.close()


def test_map_returns_results_in_order_across_a_worker_restart(dsn: str, app: pgqueue.App) -> None:
    numbers = list(range(40, 0, -1))
    h = flow.fan_out.enqueue(numbers, 0.05)
    first = WorkerProcess(dsn, APP, "--concurrency", "4", "--lease-seconds", "2").wait_ready()
    try:
        wait_until(
            lambda: (
                scalar(
                    dsn,
                    "SELECT count(*) FROM pgqueue.runs"
                    " WHERE parent_id = %s AND state = 'succeeded'",
                    (h.id,),
                )
                >= 5
            ),
            timeout=60,
            message="some children to finish",
        )
        first.kill()
    finally:
        first.stop()
    children = "SELECT count(*) FROM pgqueue.runs WHERE parent_id = %s"
    assert scalar(dsn, children, (h.id,)) == len(numbers)
    with WorkerProcess(dsn, APP, "--concurrency", "4").wait_ready():
        assert h.wait(timeout=120) == [n * n for n in numbers]
    # the restart made no new children; the parent re-executed after each wake-up
    assert scalar(dsn, children, (h.id,)) == len(numbers)


def test_map_raises_child_failed_or_returns_it(dsn: str, app: pgqueue.App) -> None:
    strict = flow.fan_out.enqueue([1, -2, 3])
    lenient = flow.fan_out.enqueue([1, -2, 3], lenient=True)
    with WorkerProcess(dsn, APP).wait_ready():
        with pytest.raises(pgqueue.RunFailed, match="ChildFailed"):
            strict.wait(timeout=60)
        result = lenient.wait(timeout=60)
    failed_id = scalar(
        dsn,
        "SELECT id FROM pgqueue.runs WHERE parent_id = %s AND state = 'failed'",
        (lenient.id,),
    )
    assert result == [1, f"failed:{failed_id}", 9]
