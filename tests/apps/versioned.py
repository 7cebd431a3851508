"""A workflow whose code version comes from WORKFLOW_VERSION (v1 or v2), for
tests/workflows/test_patched.py: the same workflow in two deploys."""

from __future__ import annotations

import os

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()
VERSION = os.environ.get("WORKFLOW_VERSION", "v1")


def effect(tag: str, run_id: int) -> str:
    record(tag, run_id)
    return tag


@app.workflow(name="versioned.ship", version=VERSION)
def ship(ctx: pgqueue.Context, order: int) -> str:
    ctx.step("pack", effect, f"pack:{VERSION}", ctx.run_id)
    ctx.wait_for_event("go", event="versioned.go", key=str(order))
    return ctx.step("send", effect, f"send:{VERSION}", ctx.run_id)


@app.workflow(name="versioned.async_ship", version=VERSION)
async def async_ship(ctx: pgqueue.AsyncContext, order: int) -> str:
    await ctx.step("pack", effect, f"pack:{VERSION}", ctx.run_id)
    return VERSION
