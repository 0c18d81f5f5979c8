"""Every public sync method of the producer API and of the broker contract has its async
twin (``name`` -> ``aname``) with the same parameters, or is sync-only on purpose and
listed below with the reason. A new method without either fails here."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from blitzq_django.engine import Broker, Client, Task, TaskHandle
from blitzq_django.engine.client.dead_letters import DeadLetters

#: (class, method) -> why it has no async twin
SYNC_ONLY: dict[tuple[type, str], str] = {
    (Client, "task"): "a decorator: registers a task, no I/O",
    (Client, "periodic"): "a decorator: registers a task and its schedule, no I/O",
    (Client, "route"): "pure: the queue routes send a task to",
    (Client, "known_queues"): "pure: the queues of the registry and the default",
    (Client, "check_queue"): "pure: runs queue_check once per queue",
    (Client, "build"): "pure: encodes a message; enqueue/aenqueue write it",
    (Client, "build_many"): "pure: encodes messages; enqueue_many/aenqueue_many write them",
    (Client, "schedules"): "operators' view (CLI, admin): the periodic store reads are sync",
    (Client, "schedule_infos"): "operators' view (admin): the periodic store reads are sync",
    (Client, "notify_schedules_changed"): "called after an admin edit: the periodic store "
                                          "writes are sync",
    (Client, "forget_queue"): "an operator's command (CLI, admin): the broker's "
                              "forget_queue is sync-only",
    (Task, "options"): "pure: a copy of the task with other per-call options",
    (Task, "s"): "pure: a workflow step (a signature); its workflow's enqueue writes it",
    (Task, "si"): "pure: an immutable workflow step; its workflow's enqueue writes it",
    (DeadLetters, "shown"): "pure: a dead letter for display",
    (Broker, "scheduled_due_ms"): "read by tests only",
    (Broker, "scheduled_payload"): "read by tests only",
    (Broker, "forget_queue"): "an operator's command, run from sync code (CLI, admin)",
    (Broker, "server_facts"): "read by the deploy checks (manage.py check), sync code",
    (Broker, "lease"): "a Lease object; its holders (history writer, metrics folder) run "
                       "on threads",
    (Broker, "mode_of"): "pure: the configured mode of a queue, no I/O",
}


def public_sync_methods(cls: type) -> list[str]:
    names = []
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        if inspect.iscoroutinefunction(member):
            continue
        names.append(name)
    return names


def shape(func: Any) -> list[tuple[str, Any, Any]]:
    """The parameters' names, kinds and defaults (annotations may be spelled differently)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(func).parameters.values()]


CLASSES = [Client, Task, TaskHandle, DeadLetters, Broker]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_public_sync_method_has_an_async_twin_with_the_same_parameters(
        cls: type) -> None:
    missing, different = [], []
    for name in public_sync_methods(cls):
        if (cls, name) in SYNC_ONLY:
            continue
        twin = getattr(cls, "a" + name, None)
        if twin is None or not inspect.iscoroutinefunction(twin):
            missing.append(name)
        elif shape(twin) != shape(getattr(cls, name)):
            different.append(f"{name}{inspect.signature(getattr(cls, name))} vs "
                             f"a{name}{inspect.signature(twin)}")
    assert not missing, f"{cls.__name__}: no async twin (add one, or list it in SYNC_ONLY " \
                        f"with the reason): {missing}"
    assert not different, f"{cls.__name__}: twins with other parameters: {different}"


def test_every_sync_only_entry_names_a_method_that_exists() -> None:
    stale = [f"{cls.__name__}.{name}" for cls, name in SYNC_ONLY
             if name not in public_sync_methods(cls)]
    assert not stale, f"SYNC_ONLY lists methods that are gone or became async: {stale}"
