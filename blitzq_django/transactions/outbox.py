"""The transactional outbox: messages written to a table in the caller's transaction,
published to Redis by a relay.

``task.options(durable=True).enqueue(...)`` (or ``.enqueue_on_commit(...)``; both do
the same thing here) builds the message now and inserts one ``OutboxMessage`` row on
the connection of ``options(using=...)``: it commits or rolls back with the caller's
data. The relay (``Relay``: a thread of ``runworker`` unless ``OUTBOX_RELAY`` is
False, or ``manage.py runoutbox``) reads rows in id order, in batches, locked with
``SELECT ... FOR UPDATE SKIP LOCKED`` where the database has it (so several relays
share the work), enqueues them in one Redis round trip and deletes them in the same
transaction.

A row is never published as two messages: each is enqueued with an idempotency key
(its own, else ``blitzq-outbox:<message id>``), so a relay that died after Redis
accepted a batch and before its delete committed re-publishes it as a no-op (within
IDEMPOTENCY_TTL). ``payload`` holds the engine's enqueue item as msgpack (never
pickle): the encoded message plus its queue, lane, due time and keys.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from ..engine import TaskHandle
from ..engine.brokers.base import Enqueue
from ..engine.core.message import pack, unpack
from ..engine.errors import ConfigurationError
from ..runtime import get_client
from ..settings import get_settings

if TYPE_CHECKING:
    from ..tasks.decorators import BlitzqTask

log = logging.getLogger("blitzq")

FORMAT = 1  # version of the payload: [1, queue, id, message, due_ms, record, key, lane,
#             unique key, task]
KEY_PREFIX = "blitzq-outbox:"
MAX_BACKOFF = 5.0  # seconds between attempts while Redis (or the database) fails

#: Set when a durable message commits in this process: the relay thread wakes at once.
_wake = threading.Event()


def wake() -> None:
    _wake.set()


def encode_item(item: Enqueue) -> bytes:
    return pack([FORMAT, item.queue, item.message_id, item.payload, item.due_ms,
                 item.record, item.idempotency_key, item.priority, item.unique_key,
                 item.task])


def decode_item(data: bytes) -> Enqueue:
    fields = unpack(bytes(data))
    if not isinstance(fields, list) or not fields or fields[0] != FORMAT or len(fields) < 10:
        raise ValueError("not an outbox payload of format 1")
    _v, queue, message_id, payload, due_ms, record, key, lane, unique, task = fields[:10]
    return Enqueue(queue, message_id, payload, due_ms or 0, record or b"", key,
                   priority=lane, unique_key=unique, task=task or "")


def publish_key(item: Enqueue) -> str:
    """The idempotency key a relay publishes ``item`` under (its own, if it has one)."""
    return item.idempotency_key or f"{KEY_PREFIX}{item.message_id}"


def _check_alias(using: str) -> None:
    served = get_settings()["OUTBOX_DATABASES"]
    if using not in served:
        raise ConfigurationError(f"the outbox on database {using!r} is not served by any "
                                 f"relay: add it to BLITZQ['OUTBOX_DATABASES'] ({served!r})")


def save_items(items: Sequence[Enqueue], *, using: str = DEFAULT_DB_ALIAS,
               outbox: str = "default", error: str = "") -> None:
    """Insert ``items`` as outbox rows on ``using`` (in the current transaction, if any);
    the relay is woken once they commit."""
    from ..models import OutboxMessage  # lazy: app loading

    _check_alias(using)
    rows = [OutboxMessage(message_id=i.message_id, outbox=outbox, queue=i.queue,
                          task_name=i.task[:255], payload=encode_item(i), last_error=error)
            for i in items]
    with transaction.atomic(using=using):
        OutboxMessage.objects.using(using).bulk_create(rows)
        transaction.on_commit(wake, using=using)


def held_id(client: Any, queue: str, key: str) -> str | None:
    """The id of the message holding idempotency key ``key`` on ``queue``, or None (also
    when it cannot be known now: the commit-time enqueue's answer corrects the handle)."""
    try:
        return client.idempotency_holder(queue, key)  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - a lookup only; Redis down is handled at commit
        log.debug("could not look up idempotency key %r on queue %r", key, queue,
                  exc_info=True)
    return None


def write(task: BlitzqTask[..., Any], calls: Sequence[tuple[Sequence[Any], dict[str, Any]]],
          using: str | None = None) -> list[TaskHandle]:
    """Durable enqueue: build each call's message now and insert it into the outbox."""
    db = task.db
    using = using or db.using or DEFAULT_DB_ALIAS
    client = task._client()
    call = task.call
    items = [client.build(task.spec, args, kwargs, call) for args, kwargs in calls]
    save_items(items, using=using, outbox=db.outbox or "default")
    handles = []
    for item in items:
        handle: TaskHandle[Any] = TaskHandle(item.message_id, item.queue, client)
        if item.idempotency_key is not None:  # held now: that message is the one that runs
            handle.id = held_id(client, item.queue, item.idempotency_key) or handle.id
        handles.append(handle)
    return handles


class Relay:
    """Publishes outbox rows of the databases ``databases`` (and outboxes ``outboxes``,
    None: all) in batches of ``batch``, waking every ``interval`` seconds at most."""

    def __init__(self, client: Callable[[], Any] | None = None, *,
                 databases: Sequence[str] = (DEFAULT_DB_ALIAS,),
                 outboxes: Sequence[str] | None = None, batch: int = 100,
                 interval: float = 0.5) -> None:
        self.client = client or get_client
        self.databases = tuple(databases)
        self.outboxes = tuple(outboxes) if outboxes else None
        self.batch = batch
        self.interval = interval
        self.published = 0

    def _rows(self, using: str) -> Any:
        from ..models import OutboxMessage  # lazy: app loading

        rows = OutboxMessage.objects.using(using).order_by("id")
        if self.outboxes is not None:
            rows = rows.filter(outbox__in=self.outboxes)
        return rows

    def publish_batch(self, using: str) -> int:
        """Publish one batch of ``using``'s rows; returns how many rows it took."""
        from django.db.models import F  # lazy: app loading (the ORM: not at package import)

        from ..models import OutboxMessage  # lazy: app loading

        if not self._rows(using).exists():  # a plain read: no lock while there is nothing
            return 0
        features = connections[using].features
        with transaction.atomic(using=using):
            rows = self._rows(using)
            if features.has_select_for_update_skip_locked:
                rows = rows.select_for_update(skip_locked=True)
            elif features.has_select_for_update:
                rows = rows.select_for_update()
            taken = list(rows[:self.batch])
            if not taken:
                return 0
            items: list[Enqueue] = []
            good: list[int] = []
            for row in taken:
                try:
                    item = decode_item(row.payload)
                except Exception as exc:  # noqa: BLE001 - kept, with the reason, for a human
                    log.error("outbox row %s (message %s) cannot be decoded: %s; left in "
                              "the table", row.pk, row.message_id, exc)
                    OutboxMessage.objects.using(using).filter(pk=row.pk).update(
                        attempts=F("attempts") + 1, last_error=f"undecodable: {exc}"[:2000])
                    continue
                items.append(Enqueue(item.queue, item.message_id, item.payload, item.due_ms,
                                     item.record, publish_key(item), priority=item.priority,
                                     unique_key=item.unique_key, task=item.task))
                good.append(row.pk)
            if not items:
                return 0
            failed: Exception | None = None
            try:
                ids = self.client().broker.enqueue(items)
            except Exception as exc:  # noqa: BLE001 - noted on the rows, committed, raised
                failed = exc
                OutboxMessage.objects.using(using).filter(pk__in=good).update(
                    attempts=F("attempts") + 1,
                    last_error=f"{type(exc).__name__}: {exc}"[:2000])
            else:
                OutboxMessage.objects.using(using).filter(pk__in=good).delete()
        if failed is not None:
            raise failed
        for item, message_id in zip(items, ids, strict=True):
            if message_id != item.message_id:
                log.info("outbox: message %s (task %s) was already enqueued as %s",
                         item.message_id, item.task, message_id)
        self.published += len(items)
        return len(taken)

    def run_once(self) -> int:
        """Publish until every database's outbox is empty; returns the rows published."""
        before = self.published
        for using in self.databases:
            while self.publish_batch(using) >= self.batch:
                pass
        return self.published - before

    def run(self, stop: threading.Event) -> None:
        """Publish until ``stop`` is set; errors are logged and retried with backoff."""
        failures = 0
        last_error = ""
        while not stop.is_set():
            _wake.clear()
            try:
                self.run_once()
                if failures:
                    log.info("outbox relay: publishing again")
                failures, last_error = 0, ""
                pause = self.interval
            except Exception as exc:  # noqa: BLE001 - a relay keeps going
                failures += 1
                pause = min(self.interval * 2 ** failures, MAX_BACKOFF)
                error = f"{type(exc).__name__}: {exc}"
                # Once per distinct error (Redis down, no table yet): not every 5 s.
                log.log(logging.DEBUG if error == last_error else logging.WARNING,
                        "outbox relay: publishing failed (%s); again in %.1f s", error, pause)
                last_error = error
            finally:
                for using in self.databases:
                    connections[using].close_if_unusable_or_obsolete()
            _wait(stop, pause)
        for using in self.databases:
            connections[using].close()


def _wait(stop: threading.Event, pause: float) -> None:
    """Sleep up to ``pause`` s, returning early when stopped or a durable message commits."""
    deadline = time.monotonic() + pause
    while not stop.is_set() and not _wake.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        _wake.wait(min(left, 0.05))


def relay_from_settings(settings: dict[str, Any], **overrides: Any) -> Relay:
    options = {"databases": settings["OUTBOX_DATABASES"], "batch": settings["OUTBOX_BATCH"],
               "interval": float(settings["OUTBOX_INTERVAL"])}
    options.update({k: v for k, v in overrides.items() if v is not None})
    return Relay(**options)


def companion(settings: dict[str, Any]) -> Callable[[threading.Event], None] | None:
    """runworker's relay thread, unless BLITZQ["OUTBOX_RELAY"] is False."""
    if not settings.get("OUTBOX_RELAY", True):
        return None
    return relay_from_settings(settings).run


__all__ = ["Relay", "companion", "decode_item", "encode_item", "save_items", "write"]
