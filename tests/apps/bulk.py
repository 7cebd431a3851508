"""A workflow for tests/ops/test_bulk.py's worker process: runs until it is canceled."""

from __future__ import annotations

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()


@app.workflow(name="bulk.patient", queue="patient", max_attempts=1)
def patient(ctx: pgqueue.Context, tag: str) -> str:
    record(f"start:{tag}")
    ctx.wait_cancelled(60)
    record(f"stopped:{tag}")
    return tag
