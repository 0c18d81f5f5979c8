"""Workflows for Django (docs/workflows.md): chains, groups and chords of
``@blitzq_task`` steps (``task.s(...)``, ``task.si(...)``).

    from blitzq_django.workflows import chain, chord, group

    handle = chord(group(resize.s(i) for i in ids), notify.s()).enqueue_on_commit()

``enqueue_on_commit()`` enqueues once the current transaction commits (at once outside
one); its handle's id is the workflow's from the start. A failure to enqueue after the
commit is logged (the data is committed; the caller's response should not fail).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from .engine import (
    Canvas,
    Chain,
    Chord,
    Client,
    Group,
    Signature,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowHandle,
    WorkflowInfo,
    WorkflowNode,
    WorkflowProgress,
    chain,
    chord,
    group,
)

log = logging.getLogger("blitzq")


def on_commit(enqueue: Callable[[], Any], using: str | None) -> None:
    """Run ``enqueue`` once the transaction on ``using`` commits (at once outside one)."""
    using = using or DEFAULT_DB_ALIAS
    if not connections[using].in_atomic_block:
        enqueue()
        return

    def run() -> None:
        try:
            enqueue()
        except Exception:
            log.exception("enqueueing a workflow after the commit failed")

    transaction.on_commit(run, using=using)


def attach_on_commit(client: Client, _merged: dict[str, Any]) -> None:
    """Client build hook (apps.py): the client's workflows enqueue on commit here."""
    client.workflows.on_commit = on_commit


__all__ = ["Canvas", "Chain", "Chord", "Group", "Signature", "WorkflowCancelled",
           "WorkflowFailed", "WorkflowHandle", "WorkflowInfo", "WorkflowNode",
           "WorkflowProgress", "chain", "chord", "group", "on_commit"]
