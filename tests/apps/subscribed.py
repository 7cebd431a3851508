"""Workflows started by events (@app.workflow(on_event=...)), for
tests/workflows/test_event_started.py and its emitter processes."""

from __future__ import annotations

import sys
from typing import Any

import pgqueue
from tests.apps.basic import record

app = pgqueue.App()


@app.workflow(name="subscribed.fulfil", on_event="order.paid")
def fulfil(ctx: pgqueue.Context, payload: Any) -> Any:
    record("fulfil", ctx.run_id)
    return ctx.step("total", lambda: sum(payload["items"]))


@app.workflow(name="subscribed.receipt", on_event="order.paid")
def receipt(ctx: pgqueue.Context, payload: Any) -> str:
    record("receipt", ctx.run_id)
    return f"receipt for order {payload['order']}"


@app.workflow(name="subscribed.checkout")
def checkout(ctx: pgqueue.Context, order: int) -> int:
    """Pays an order: emits order.paid from the workflow (once, whatever its replays)."""
    ctx.emit_event("paid", "order.paid", payload={"order": order, "items": [order, 1]})
    ctx.sleep("settle", 0.05)  # a replay after a durable wait must not emit again
    return order


def emit_many(dsn: str, n: int) -> None:
    """An emitter process: `n` events of order.paid, each in its own transaction."""
    app.configure(dsn=dsn)
    for i in range(n):
        app.emit_event("order.paid", payload={"order": i, "items": [i]})
    app.close()


if __name__ == "__main__":
    emit_many(sys.argv[1], int(sys.argv[2]))
