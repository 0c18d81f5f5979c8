"""Real views that enqueue: confirming an order charges its card in the background.

The same work in a sync view and an async view (``aenqueue`` on the request's event
loop), served alike by runserver, a WSGI server or an ASGI server (daphne). A form post
is redirected to the order's page (which shows the task's state); a request that
accepts only JSON gets ``202 {"task_id", "queue"}``.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template import engines
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from blitzq_django.conf import get_client
from blitzq_django.engine import TaskHandle

from .models import Order
from .tasks import charge_card

# Inline, so the example project needs no templates directory of its own.
ORDER_PAGE = engines["django"].from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Order {{ order.reference }}</title></head>
<body>
  <h1>Order {{ order.reference }}</h1>
  <p>Status: <strong id="status">{{ order.status }}</strong></p>
  {% if task_id %}
    <p>Payment task <code id="task-id">{{ task_id }}</code>:
       <strong id="task-state">{{ state }}</strong></p>
  {% endif %}
  <form method="post" action="{% url 'shop:confirm' order.pk %}">{% csrf_token %}
    <button type="submit" id="confirm-sync">Confirm (sync view)</button>
  </form>
  <form method="post" action="{% url 'shop:confirm-async' order.pk %}">{% csrf_token %}
    <button type="submit" id="confirm-async">Confirm (async view)</button>
  </form>
</body></html>""")


def _answer(request: HttpRequest, order: Order, handle: TaskHandle) -> HttpResponse:
    if request.accepts("application/json") and not request.accepts("text/html"):
        return JsonResponse({"order": order.pk, "task_id": handle.id, "queue": handle.queue},
                            status=202)
    url = reverse("shop:order", args=[order.pk])
    return redirect(f"{url}?{urlencode({'task': handle.id, 'queue': handle.queue})}")


@require_GET
def order_detail(request: HttpRequest, pk: int) -> HttpResponse:
    order = get_object_or_404(Order, pk=pk)
    task_id, queue = request.GET.get("task", ""), request.GET.get("queue", "")
    state = None
    if task_id and queue:
        record = get_client().inspect(task_id, queue=queue)
        state = record.state if record is not None else "queued"
    return HttpResponse(ORDER_PAGE.render({"order": order, "task_id": task_id, "state": state},
                                          request))


@require_POST
def confirm_order(request: HttpRequest, pk: int) -> HttpResponse:
    order = get_object_or_404(Order, pk=pk)
    order.status = "confirmed"
    order.save(update_fields=["status"])
    handle = charge_card.enqueue(order.reference, fail_times=0)
    return _answer(request, order, handle)


@require_POST
async def confirm_order_async(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        order = await Order.objects.aget(pk=pk)
    except Order.DoesNotExist:
        raise Http404("no such order") from None
    order.status = "confirmed"
    await order.asave(update_fields=["status"])
    handle = await charge_card.aenqueue(order.reference, fail_times=0)
    return _answer(request, order, handle)
