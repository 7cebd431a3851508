"""The project's pgqueue App and its tasks (settings.PGQUEUE["APP"] points here)."""

import pgqueue

from orders.models import Order

app = pgqueue.App()  # no DSN: pgqueue.contrib.django uses DATABASES["default"]


@app.task(queue="orders", max_attempts=5)
def confirm_order(order_id: int) -> str:
    """Runs on a worker after the order's transaction committed (never before: the run is
    inserted in that same transaction)."""
    updated = Order.objects.filter(pk=order_id, status="new").update(status="confirmed")
    return "confirmed" if updated else "already confirmed"
