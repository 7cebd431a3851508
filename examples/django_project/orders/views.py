"""A JSON API: create an order (row + task in one transaction), send its receipt with
Django's tasks API, read a task's result."""

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from myproj.tasks import confirm_order
from orders.models import Order
from orders.tasks import send_receipt

try:
    from django.tasks.exceptions import TaskResultDoesNotExist  # Django 6
except ImportError:
    from django_tasks.exceptions import TaskResultDoesNotExist  # Django 5.2: the backport


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(email=request.POST["email"])
        # Joins the atomic block: the run commits with the order, or not at all (on
        # psycopg2: it is enqueued just after the commit, and run.id is known then).
        run = confirm_order.enqueue(order.pk)
        if request.POST.get("fail"):
            raise RuntimeError("the payment provider said no")  # rolls back order and run
    return JsonResponse({"order": order.pk, "run": run.id}, status=201)


@require_GET
def order_detail(request: HttpRequest, pk: int) -> JsonResponse:
    order = get_object_or_404(Order, pk=pk)
    sent = order.receipt_sent_at.isoformat() if order.receipt_sent_at else None
    return JsonResponse({"id": order.pk, "status": order.status, "receipt_sent_at": sent})


@csrf_exempt
@require_POST
def send_receipt_view(request: HttpRequest, pk: int) -> JsonResponse:
    order = get_object_or_404(Order, pk=pk)
    result = send_receipt.enqueue(order.pk)
    return JsonResponse({"result_id": result.id}, status=202)


@require_GET
def receipt_result(request: HttpRequest, result_id: str) -> JsonResponse:
    try:
        result = send_receipt.get_result(result_id)
    except TaskResultDoesNotExist:
        return JsonResponse({"error": "no such result"}, status=404)
    body = {"status": result.status, "attempts": result.attempts}
    if result.status == "SUCCESSFUL":
        body["value"] = result.return_value
    elif result.errors:
        body["error"] = result.errors[-1].exception_class_path
    return JsonResponse(body)
