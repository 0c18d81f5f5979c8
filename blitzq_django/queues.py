"""Which queues exist, and which a default ``runworker`` serves: one answer for
runworker, the check at enqueue, and what lists queues (``blitzq stats``, the admin,
the dashboard, ``/metrics``).

A queue is *named* by the project: ``BLITZQ["QUEUES"]``, the queue of a registered
task (``@blitzq_task(queue=...)``, a ``django.tasks`` task's ``queue_name``), a
``ROUTES`` target, the ``QUEUES`` of a ``django.tasks`` BlitzQ backend, a ``PERIODIC``
schedule's queue. Redis keeps the *seen* queues: every queue a message was written to,
from any process (engine ``client.seen_queues()``). ``runworker`` without ``--queues``
serves both (read when it starts).

Enqueue refuses a queue the project does not name (ConfigurationError, with the closest
names), since no default worker would serve it. One exception: a queue only a
``django.tasks`` backend that accepts any queue name let through (``.using(queue_name=
...)``, TASKS QUEUES ``[]``): it is accepted with a warning, once per queue and process,
and a runworker started from then on serves it (Redis has seen it).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from .engine import Client
from .engine.core.suggest import closest
from .engine.errors import BlitzqError, ConfigurationError
from .registry import declared_queues, registry
from .runtime import get_client
from .settings import get_settings

log = logging.getLogger("blitzq.queues")

__all__ = ["Watch", "check_enqueue", "named", "served_by_default", "shown", "unknown"]

#: Seconds between two reads of the seen queues by a default runworker (Watch).
WATCH_INTERVAL_S = 30.0

_warned: set[str] = set()  # queues accepted with a warning in this process
_warned_lock = threading.Lock()

#: Features that name queues (the django.tasks backend's QUEUES, the schedules'):
#: source(merged settings) -> queue names. apps.py adds them, in this order.
QueueSource = Callable[[dict[str, Any]], Iterable[str]]
_sources: list[QueueSource] = []


def add_source(source: QueueSource) -> None:
    """Count the queues ``source(merged)`` names among the named ones."""
    if source not in _sources:
        _sources.append(source)


def attach_check(client: Client, merged: dict[str, Any]) -> None:
    """Build hook (runtime): a client refuses a queue no default worker serves."""
    client.queue_check = check_enqueue


def _featured(merged: dict[str, Any]) -> list[str]:
    return [queue for source in _sources for queue in source(merged)]


def named(merged: dict[str, Any] | None = None) -> list[str]:
    """Every queue the project names (see the module's docstring), QUEUES first."""
    merged = merged if merged is not None else get_settings()
    routed = sorted(set(merged.get("ROUTES", {}).values()))
    return list(dict.fromkeys([*merged["QUEUES"], merged["DEFAULT_QUEUE"],
                               *sorted(declared_queues), *routed, *_featured(merged)]))


def served_by_default(client: Any = None, merged: dict[str, Any] | None = None
                      ) -> tuple[str, ...]:
    """What ``runworker`` without ``--queues`` serves: the named queues, then the seen
    ones (one Redis call; raises BrokerUnavailable when Redis cannot be reached)."""
    client = client if client is not None else get_client()
    return tuple(dict.fromkeys([*named(merged), *client.seen_queues()]))


def shown(extra: Iterable[str] = (), *, seen: Iterable[str] = ()) -> list[str]:
    """The queues a listing shows: the named ones, the ``seen`` ones, and ``extra`` (the
    queues live workers serve); sorted, the default queue first."""
    merged = get_settings()
    names = {*named(merged), *seen, *extra}
    default = merged["DEFAULT_QUEUE"]
    return sorted(names, key=lambda q: (q != default, q))


# -- the check at enqueue ------------------------------------------------------------------


def check_enqueue(queue: str) -> None:
    """The client's ``queue_check``: refuse (ConfigurationError) a queue that no default
    worker serves; accept with a warning one that only a django.tasks backend accepting
    any name let through. Called once per queue by each client."""
    merged = get_settings()
    names = named(merged)
    if queue in _fixed(merged):
        return
    if queue in names:  # declared by a django.tasks backend for a .using() call only
        with _warned_lock:
            first = queue not in _warned
            _warned.add(queue)
        if first:
            log.warning(
                "queue %r is named by no setting and no task (a django.tasks "
                ".using(queue_name=%r) or a backend whose QUEUES accepts any name): a "
                "runworker started from now on serves it (Redis keeps it among the seen "
                "queues), one already running does not until it restarts; list it in "
                "BLITZQ['QUEUES'] so that every worker serves it from the start", queue, queue)
        return
    if queue in _served_live():
        return
    close = closest(queue, names, n=3)
    raise ConfigurationError(
        f"queue {queue!r} is not served by a worker started without --queues, which "
        f"serves {', '.join(names)} (BLITZQ['QUEUES'], the queues of tasks, ROUTES, "
        "django.tasks backends and PERIODIC), and no running worker serves it: the message "
        "would wait for ever."
        + (f" Did you mean {' or '.join(map(repr, close))}?" if close else "")
        + f" If workers serve it (runworker --queues {queue}), add it to BLITZQ['QUEUES'].")


def _served_live() -> set[str]:
    """The queues live workers serve (a ``runworker --queues`` the settings don't name):
    work sent there is served, so it is accepted. Read only for a queue about to be
    refused, once per queue and client, so enqueues of named queues never pay for it."""
    try:
        return {q for worker in get_client().workers() for q in worker.queues}
    except BlitzqError:  # Redis unreachable: refuse as the settings alone say
        return set()


def _fixed(merged: dict[str, Any]) -> set[str]:
    """The queues the settings and the code name: all the named ones but those only a
    django.tasks ``.using(queue_name=...)`` declared."""
    return ({*merged["QUEUES"], merged["DEFAULT_QUEUE"], *merged["ROUTES"].values(),
             *_featured(merged)} | _code_queues())


def _code_queues() -> set[str]:
    """The queues the code of the registered tasks declares: a ``@blitzq_task(queue=)``,
    a ``django.tasks`` function's ``queue_name`` as decorated (the backend may have
    registered it first for a ``.using()`` copy with another queue)."""
    found = set()
    for spec in registry:
        bound = getattr(spec.func, "__blitzq_django_task__", None)  # tasks/django_tasks.py's runner
        if bound is None:
            if spec.queue in declared_queues:  # not the default a task without queue= got
                found.add(spec.queue)
            continue
        func = bound[0].func
        decorated = getattr(sys.modules.get(func.__module__), func.__name__, None)
        queue = getattr(decorated, "queue_name", None)
        if isinstance(queue, str):
            found.add(queue)
    return found


# -- runworker -------------------------------------------------------------------------------


def unknown(given: Iterable[str], client: Any = None) -> tuple[list[str], str]:
    """The queues of ``runworker --queues`` that the project does not name and Redis has
    never seen (a typo?), and why the seen ones could not be read ("" when they were)."""
    names = set(named())
    left = [q for q in given if q not in names]
    if not left:
        return [], ""
    try:
        seen = set((client if client is not None else get_client()).seen_queues())
    except (BlitzqError, OSError) as exc:
        return [], f"{type(exc).__name__}: {exc}"
    return [q for q in left if q not in seen], ""


class Watch:
    """Beside a default runworker: reads the seen queues every ``interval`` seconds and
    logs a WARNING for each one the worker does not serve (a queue first written to
    after it started, or one it could not read then): a restart serves it."""

    def __init__(self, client: Any, served: Iterable[str],
                 interval: float = WATCH_INTERVAL_S) -> None:
        self.client = client
        self.told = set(served)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="blitzq-queue-watch",
                                        daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def look(self) -> list[str]:
        """Read the seen queues once; warn about (and return) the new unserved ones."""
        new = [q for q in self.client.seen_queues() if q not in self.told]
        for queue in new:
            log.warning("queue %r has messages written to it and this worker does not serve "
                        "it (it was first written to after the worker started): restart "
                        "runworker to serve it, or run one with --queues %s", queue, queue)
        self.told.update(new)
        return new

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.look()
            except Exception as exc:  # noqa: BLE001 - Redis down: the worker says so too
                log.debug("cannot read the seen queues: %s", exc)
