"""What lets the pages of the table-less models (dead letters, queues) be drawn by Django's
own ``admin/change_list.html``, so each Django version lays them out its own way (its
breadcrumbs, object tools, filter panel and their places: 6.1 moved all three).

Django's template reads a ``ChangeList``; these pages have no queryset, so ``PageList``
answers the few attributes the template reads outside the blocks the pages override
(``search``, ``date_hierarchy``, ``result_list``, ``pagination``,
``object-tools-items``), and ``Filter`` is one group of the filter panel, drawn by
Django's ``{% admin_list_filter %}`` and its ``admin/filter.html``. ``PageAdmin`` is the
ModelAdmin of such a page.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models.options import Options
from django.http import HttpRequest


@dataclass(frozen=True)
class Filter:
    """One group of the filter panel: ``choices`` are (label, query string, selected)."""

    title: str
    options: Sequence[tuple[str, str, bool]]
    template: str = "admin/filter.html"

    def choices(self, changelist: Any) -> Iterator[dict[str, Any]]:
        for label, query, selected in self.options:
            yield {"display": label, "query_string": query, "selected": selected}


@dataclass
class PageList:
    """The part of a ``ChangeList`` that ``admin/change_list.html`` reads itself."""

    opts: Options
    filter_specs: list[Filter] = field(default_factory=list)
    #: the query string of the page without any filter ("Clear all filters"), or "" when
    #: no filter is active
    clear_all_filters_qs: str = ""
    formset: None = None
    date_hierarchy: None = None
    is_facets_optional: bool = False
    show_admin_actions: bool = False

    @property
    def has_filters(self) -> bool:
        return bool(self.filter_specs)

    @property
    def has_active_filters(self) -> bool:
        return bool(self.clear_all_filters_qs)


def list_context(opts: Options, filters: Sequence[Filter] = (),
                 clear_all: str = "") -> dict[str, Any]:
    """The context ``admin/change_list.html`` needs besides the admin site's."""
    return {"cl": PageList(opts, list(filters), clear_all), "opts": opts,
            "media": forms.Media()}


class PageAdmin(admin.ModelAdmin):
    """An admin page over a model without a table (DeadLetter, QueueOverview): it only
    shows what the engine reports; its own actions carry their own permissions."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
