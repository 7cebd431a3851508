"""A workflow deployed in three versions (PATCHED_CODE: v1, v2, v3), for
tests/workflows/test_patched.py: v2 adds a step before the first one and another after
the wait, each behind ctx.patched(); v3 keeps the first patch's code only and deprecates
it."""

from __future__ import annotations

import os
from typing import Any

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()
CODE = os.environ.get("PATCHED_CODE", "v1")


def effect(tag: str, run_id: int, value: int) -> int:
    record(tag, run_id)
    return value


@app.workflow(name="patched.checkout")
def checkout(ctx: pgqueue.Context, n: int) -> dict[str, Any]:
    receipt = 0
    if CODE == "v2" and ctx.patched("receipt"):
        receipt = ctx.step("receipt", effect, "receipt", ctx.run_id, 100)
    if CODE == "v3":
        ctx.deprecate_patch("receipt")
        receipt = ctx.step("receipt", effect, "receipt", ctx.run_id, 100)
    a = ctx.step("a", effect, "a", ctx.run_id, n)
    ctx.wait_for_event("go", event="patched.go", key=str(ctx.run_id))
    bonus = 0
    if CODE in ("v2", "v3") and ctx.patched("bonus"):
        bonus = ctx.step("bonus", effect, "bonus", ctx.run_id, 10)
    b = ctx.step("b", effect, "b", ctx.run_id, 1)
    return {"receipt": receipt, "a": a, "bonus": bonus, "b": b}
