"""Real views that enqueue: confirming an order charges its card in the background.

The same work in a sync view and an async view (``aenqueue`` on the request's event
loop), served alike by runserver, a WSGI server or an ASGI server (daphne). A form post
is redirected to the order's page (which shows the task's state); a request that
accepts only JSON gets ``202 {"task_id", "queue"}``.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template import engines
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from blitzq_django import TaskHandle, get_client
from blitzq_django.progress import for_user

from .models import Order
from .tasks import charge_card, export_orders

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


EXPORT_PAGE = engines["django"].from_string("""{% load static %}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Export orders</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 40rem; }
  .bar { background: #e5e7eb; border-radius: 6px; height: 1.25rem; overflow: hidden; }
  .bar > div { background: #2563eb; height: 100%; width: 0; transition: width .15s; }
  .bar[data-state="succeeded"] > div { background: #16a34a; }
  .bar[data-state="failed"] > div, .bar[data-state="dead_lettered"] > div { background: #dc2626; }
</style>
<script src="{% static 'blitzq_django/progress.js' %}"></script></head>
<body>
  <h1>Export orders</h1>
  <form method="post">{% csrf_token %}
    <label>Rows <input name="rows" type="number" value="{{ rows }}" min="1" max="1000"></label>
    <button type="submit" id="start-export">Start the export</button>
  </form>
  {% if task_id %}
    <p>Task <code id="task-id">{{ task_id }}</code>: <strong id="task-state">pending</strong></p>
    <div class="bar" id="bar" role="progressbar" aria-valuemin="0" aria-valuemax="100"
         aria-valuenow="0"><div></div></div>
    <p id="note"></p>
    <p id="outcome"></p>
    <script>
      (function () {
        var bar = document.getElementById("bar");
        function show(fraction) {
          var percent = Math.round((fraction || 0) * 100);
          bar.firstElementChild.style.width = percent + "%";
          bar.setAttribute("aria-valuenow", String(percent));
        }
        BlitzQ.follow({{ task_id_json|safe }}, {
          queue: {{ queue_json|safe }},
          onState: function (state) {
            document.getElementById("task-state").textContent = state;
            bar.dataset.state = state;
          },
          onProgress: function (progress) {
            show(progress.fraction);
            document.getElementById("note").textContent = progress.note || "";
          },
          onDone: function (result) {
            show(1);
            document.getElementById("outcome").textContent =
              "Done: " + result.rows + " rows exported.";
          },
          onError: function (error) {
            document.getElementById("outcome").textContent =
              "Failed: " + (error.message || error.type);
          }
        });
      })();
    </script>
  {% endif %}
</body></html>""")


@login_required(login_url="/admin/login/")
def export(request: HttpRequest) -> HttpResponse:
    """Enqueues a slow export for the logged-in user (POST), then follows its progress
    with blitzq_django/progress.js (docs/progress.md)."""
    if request.method == "POST":
        rows = max(1, min(int(request.POST.get("rows") or 20), 1000))
        handle = for_user(export_orders, request).enqueue(rows)
        query = urlencode({"task": handle.id, "queue": handle.queue})
        return redirect(f"{reverse('shop:export')}?{query}")
    task_id, queue = request.GET.get("task", ""), request.GET.get("queue", "")
    return HttpResponse(EXPORT_PAGE.render({
        "rows": 20, "task_id": task_id, "queue": queue,
        "task_id_json": json.dumps(task_id).replace("<", "\\u003c"),
        "queue_json": json.dumps(queue).replace("<", "\\u003c")}, request))
