"""Tasks for tests/faults/test_poolers.py: plain, async and workflow runs with steps, a child it
waits for and a child it spawns, all through a pooler."""

from __future__ import annotations

import pgqueue

app = pgqueue.App()  # dsn and pooler from the command line (--dsn, --pooler)


@app.task(name="pooled.plain")
def plain(i: int) -> int:
    return i


@app.task(name="pooled.aplain")
async def aplain(i: int) -> int:
    return -i


@app.task(name="pooled.child")
def child(i: int) -> int:
    return 2 * i


@app.workflow(name="pooled.flow")
def flow(ctx: pgqueue.Context, i: int) -> int:
    a = ctx.step("a", plain, i)
    doubled = ctx.call("double", child, i)
    ctx.spawn("note", plain, i)
    b = ctx.step("b", plain, 1)
    return int(a) + int(doubled) + int(b)
