"""Tasks written with Django's own tasks API; pgqueue workers run them
(settings.TASKS uses pgqueue.contrib.django.PgQueueBackend)."""

from django.utils import timezone

from orders.models import Order

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # Django 5.2: the backport


@task(queue_name="receipts", priority=10)
def send_receipt(order_id: int) -> str:
    order = Order.objects.get(pk=order_id)
    if order.email.endswith(".invalid"):
        raise ValueError(f"cannot mail {order.email}")
    Order.objects.filter(pk=order_id).update(receipt_sent_at=timezone.now())
    return f"receipt sent to {order.email}"
