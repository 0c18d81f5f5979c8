"""Dead letters: list (filters), inspect, replay selected or all matching, purge.

Backed by the engine's dead-letter API (``client.dead_letters``), never by a table, so
it works with history off. The ``DeadLetter`` model only carries the pages and their
permissions: view (list, inspect), ``replay_deadletter`` and ``purge_deadletter``,
each checked on the server (403) and hiding its buttons without it.
"""

from __future__ import annotations

import heapq
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import path, reverse

from .. import redaction
from ..engine.core import deadletter as reasons
from ..engine.core.deadletter import DeadLetter as Letter
from ..engine.core.names import name_ok
from ..models import DeadLetter, TaskRecord
from ..registry import registry
from ..web.common import (
    age,
    as_json,
    client,
    engine_errors,
    from_ms,
    known_queues,
    record_context,
)
from .pages import Filter, PageAdmin, list_context

PER_PAGE = 100
REASONS = (reasons.RETRIES_EXHAUSTED, reasons.NOT_RETRYABLE, reasons.MAX_DELIVERIES,
           reasons.UNKNOWN_TASK, reasons.MALFORMED, reasons.UNSETTLEABLE)
#: Query parameters that filter the listing (and "all matching").
FILTERS = ("queue", "task", "reason", "error_type")


def _filters(params: QueryDict) -> dict[str, str]:
    return {k: params[k].strip() for k in FILTERS if params.get(k, "").strip()}


def _engine_filters(filters: dict[str, str]) -> dict[str, Any]:
    return {k: v for k, v in filters.items() if k != "queue"}


def _row(letter: Letter) -> dict[str, Any]:
    return {"id": letter.id, "queue": letter.queue, "task": letter.task or "",
            "reason": letter.reason, "attempt": letter.attempt,
            "deliveries": letter.delivery_count, "error_type": letter.error_type or "",
            "error_message": letter.error_message or "", "dead": from_ms(letter.dead_ms),
            "age": age(letter.dead_ms), "key": f"{letter.queue}:{letter.id}",
            "inspect": urlencode({"queue": letter.queue, "id": letter.id})}


def _split(keys: list[str]) -> dict[str, list[str]]:
    """"queue:id" checkbox values -> queue -> ids (queue names never hold a colon)."""
    out: dict[str, list[str]] = {}
    for key in keys:
        queue, sep, message_id = key.partition(":")
        if sep and message_id and name_ok(queue):
            out.setdefault(queue, []).append(message_id)
    return out


@admin.register(DeadLetter)
class DeadLetterAdmin(PageAdmin):
    # -- permissions -----------------------------------------------------------------

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.replay_deadletter")

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.purge_deadletter")

    # -- URLs: the admin's own views, no table -----------------------------------------

    def get_urls(self) -> list[Any]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("", wrap(self.changelist_view), name=f"{info}_changelist"),
            path("inspect/", wrap(self.inspect_view), name=f"{info}_inspect"),
            path("replay/", wrap(self.replay_view), name=f"{info}_replay"),
            path("purge/", wrap(self.purge_view), name=f"{info}_purge"),
        ]

    def _url(self, name: str, params: dict[str, str] | None = None) -> str:
        url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}",
                      current_app=self.admin_site.name)
        return f"{url}?{urlencode(params)}" if params else url

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, "title": title,
                "can_replay": self.has_replay_permission(request),
                "can_purge": self.has_purge_permission(request),
                "list_url": self._url("changelist"), "replay_url": self._url("replay"),
                "purge_url": self._url("purge"), **extra}

    def _queues(self, filters: dict[str, str]) -> list[str]:
        queue = filters.get("queue")
        if queue:
            return [queue] if name_ok(queue) else []
        return known_queues(client().seen_queues())

    # -- the list --------------------------------------------------------------------

    def changelist_view(self, request: HttpRequest,
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        filters = _filters(request.GET)
        try:
            page = max(0, int(request.GET.get("p", "0")))
        except ValueError:
            page = 0
        rows: list[dict[str, Any]] = []
        more = False
        counts: dict[str, int] = {}
        queues: list[str] = []
        unavailable = True  # until Redis answered: no count is shown, not even 0
        with engine_errors(request, "The dead letters could not be read"):
            queues = known_queues(client().seen_queues())
            dl = client().dead_letters
            wanted = (page + 1) * PER_PAGE + 1
            found = [dl.list(q, limit=wanted, **_engine_filters(filters))
                     for q in self._queues(filters)]
            # Each queue's list is newest first: merge them, newest first.
            merged = list(heapq.merge(*found, key=lambda x: -x.dead_ms))
            rows = [_row(x) for x in merged[page * PER_PAGE:(page + 1) * PER_PAGE]]
            more = len(merged) > (page + 1) * PER_PAGE
            counts = {q: client().queue_stats(q).dead_letters for q in queues}
            unavailable = False
        base: dict[str, str | None] = dict(filters)

        def link(**change: str | None) -> str:
            params = {**base, **change}
            return "?" + urlencode({k: v for k, v in params.items() if v})

        panel = [
            Filter("queue", [("All", link(queue=None), "queue" not in filters)] + [
                (f"{q} ({counts[q]})" if q in counts else q, link(queue=q),
                 filters.get("queue") == q) for q in queues]),
            Filter("reason", [("All", link(reason=None), "reason" not in filters)] + [
                (r, link(reason=r), filters.get("reason") == r) for r in REASONS]),
            Filter("task", [("All", link(task=None), "task" not in filters)] + [
                (t, link(task=t), filters.get("task") == t)
                for t in sorted(spec.name for spec in registry)]),
        ]
        context = self._context(
            request, "Dead letters", rows=rows, filters=filters,
            page=page, more=more, previous_link=link(p=str(page - 1)) if page else None,
            next_link=link(p=str(page + 1)) if more else None,
            all_query=urlencode({**filters, "all": "1"}), unavailable=unavailable,
            total=sum(counts.values()),
            **list_context(self.opts, panel, "?" if filters else ""), **(extra_context or {}))
        return TemplateResponse(request, "admin/blitzq_django/deadletter/change_list.html",
                                context)

    # -- inspect one -------------------------------------------------------------------

    def inspect_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        queue, message_id = request.GET.get("queue", ""), request.GET.get("id", "")
        if not (name_ok(queue) and message_id):
            return HttpResponseRedirect(self._url("changelist"))
        shown: dict[str, Any] | None = None
        letter = None
        live = None
        unavailable = True  # until Redis answered: not "not a dead letter"
        with engine_errors(request, "The dead letter could not be read"):
            letter = client().dead_letters.get(message_id, queue)
            if letter is not None:
                shown = redaction.shown_dead_letter(letter)
            else:
                live = record_context(client().inspect(message_id, queue=queue))
            unavailable = False
        history_url = None
        if request.user.has_perm(f"{self.opts.app_label}.view_taskrecord"):
            row = TaskRecord.objects.filter(task_id=message_id).only("pk").first()
            if row is not None:  # history on: link the message's record and timeline
                history_url = reverse(f"admin:{self.opts.app_label}_taskrecord_change",
                                      args=[row.pk], current_app=self.admin_site.name)
        context = self._context(
            request, f"Dead letter {message_id}", history_url=history_url, queue=queue,
            message_id=message_id, letter=shown, live=live, unavailable=unavailable,
            args=as_json(shown["args"]) if shown else "",
            kwargs=as_json(shown["kwargs"]) if shown else "",
            dead=from_ms(letter.dead_ms) if letter else None,
            age=age(letter.dead_ms) if letter else "",
            truncated=letter.truncated if letter else False,
            payload_size=(letter.payload_size or len(letter.payload)) if letter else 0,
            decodable=(letter.message is not None) if letter else False,
            key=f"{queue}:{message_id}")
        return TemplateResponse(request, "admin/blitzq_django/deadletter/inspect.html", context)

    # -- replay and purge: confirmation page, then POST with confirm=yes ----------------

    def replay_view(self, request: HttpRequest) -> HttpResponse:
        if not (self.has_view_permission(request) and self.has_replay_permission(request)):
            raise PermissionDenied
        return self._bulk(request, "replay")

    def purge_view(self, request: HttpRequest) -> HttpResponse:
        if not (self.has_view_permission(request) and self.has_purge_permission(request)):
            raise PermissionDenied
        return self._bulk(request, "purge")

    def _bulk(self, request: HttpRequest, verb: str) -> HttpResponse:
        params = request.POST if request.method == "POST" else request.GET
        every = params.get("all") == "1"
        filters = _filters(params)
        selected = _split(params.getlist("ids"))
        back = params.get("next") or ""
        if not back.startswith(self._url("changelist")):
            back = self._url("changelist")
        if not every and not selected:
            messages.warning(request, f"Select dead letters to {verb} first.")
            return HttpResponseRedirect(back)
        if request.method == "POST" and params.get("confirm") == "yes":
            done = 0
            asked = 0
            done_word = {"replay": "replayed", "purge": "purged"}[verb]
            with engine_errors(request, f"The dead letters could not be {done_word}"):
                dl = client().dead_letters
                if every:
                    for q in self._queues(filters):
                        engine = _engine_filters(filters)
                        if verb == "replay":
                            ids = [x.id for x in dl.list(q, limit=10**12, **engine)]
                            asked += len(ids)
                            done += dl.replay(ids, q)
                        else:
                            n = dl.purge(q, **engine)  # no filters: all of the queue's
                            done += n
                            asked += n
                else:
                    for q, ids in selected.items():
                        asked += len(ids)
                        done += dl.replay(ids, q) if verb == "replay" else dl.purge(q, ids=ids)
            self._report(request, verb, done, asked)
            if params.get("from") == "inspect" and len(selected) == 1 and not every:
                ((q, ids),) = selected.items()
                if len(ids) == 1:
                    return HttpResponseRedirect(self._url("inspect", {"queue": q, "id": ids[0]}))
            return HttpResponseRedirect(back)
        # The confirmation page: what would be done, and a form to do it.
        letters: list[dict[str, Any]] = []
        count = 0
        unavailable = True  # until Redis answered: not "nothing to replay"
        with engine_errors(request, "The dead letters could not be read"):
            dl = client().dead_letters
            if every:
                for q in self._queues(filters):
                    count += dl.count(q, **_engine_filters(filters))
                    letters += [_row(x) for x in
                                dl.list(q, limit=20, **_engine_filters(filters))]
            else:
                for q, ids in selected.items():
                    for message_id in ids:
                        letter = dl.get(message_id, q)
                        if letter is not None:
                            letters.append(_row(letter))
                count = len(letters)
            unavailable = False
        context = self._context(
            request, f"{verb.capitalize()} dead letters: are you sure?", verb=verb,
            every=every, filters=filters, letters=letters[:100], count=count,
            more=count - len(letters[:100]), keys=[r["key"] for r in letters],
            action_url=self._url(verb), back=back, origin=params.get("from", ""),
            unavailable=unavailable)
        return TemplateResponse(request, "admin/blitzq_django/deadletter/confirm.html", context)

    def _report(self, request: HttpRequest, verb: str, done: int, asked: int) -> None:
        plural = "" if done == 1 else "s"
        if verb == "replay":
            messages.success(request, f"Replayed {done} dead letter{plural}: back on their "
                                      "queue with a fresh attempt budget.")
            if asked > done:
                messages.warning(request, f"{asked - done} could not be replayed: gone "
                                          "meanwhile, malformed or truncated (purge those).")
        else:
            messages.success(request, f"Purged {done} dead letter{plural}.")

