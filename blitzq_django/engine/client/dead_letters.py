"""DeadLetters: list, get, count, replay and purge a queue's dead letters.

Replay gives the message a fresh attempt budget (attempt 1) and, by default,
keeps its id, so a handle held by the producer sees the new outcome; pass
``new_id=True`` to run it under a new id (the old record is kept). Each replay
call is one atomic step per batch: a dead letter replayed or purged by someone
else in the meantime is skipped, never run twice.
"""

from __future__ import annotations

import builtins  # the methods list() shadow list in their class's annotations
import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..brokers.base import Broker
from ..core.deadletter import DeadLetter
from ..core.ids import new_id as new_message_id
from ..core.ids import now_ms
from ..core.message import decode, encode
from ..core.redact import DEFAULT_REDACT, positional_names, redact
from ..core.task import TaskRegistry

BATCH = 200  # dead letters per round trip in bulk operations


@dataclass(frozen=True, slots=True, kw_only=True)
class Filter:
    task: str | None = None  # glob on the task name
    reason: str | None = None
    error_type: str | None = None  # the exception's class name (qualname), exactly
    older_than: float | None = None  # seconds
    newer_than: float | None = None  # seconds

    def window_ms(self) -> tuple[int, int]:
        now = now_ms()
        high = now - int(self.older_than * 1000) if self.older_than is not None else now + 10**9
        low = now - int(self.newer_than * 1000) if self.newer_than is not None else 0
        return low, high

    def matches(self, letter: DeadLetter) -> bool:
        if self.reason is not None and letter.reason != self.reason:
            return False
        if self.error_type is not None and letter.error_type != self.error_type:
            return False
        return self.task is None or fnmatch.fnmatchcase(letter.task or "", self.task)

    @property
    def by_score_only(self) -> bool:
        return self.task is None and self.reason is None and self.error_type is None


def _letters(bodies: Iterable[bytes | None]) -> list[DeadLetter]:
    return [DeadLetter.from_bytes(b) for b in bodies if b is not None]


def _replayable(letters: Sequence[DeadLetter], new_id: bool) -> list[tuple[str, str, bytes]]:
    items = []
    for letter in letters:
        if letter.truncated:
            continue  # only the start of an entry too large to be a message was kept
        try:
            message = decode(letter.payload)
        except Exception:
            continue  # a malformed message cannot run; purge it instead
        fresh = replace(message, attempt=1, eta_ms=None,
                        id=new_message_id() if new_id else message.id)
        items.append((letter.id, fresh.id, encode(fresh, 1 << 62)))
    return items


def shown(letter: DeadLetter, names: Sequence[str] = DEFAULT_REDACT,
          registry: TaskRegistry | None = None) -> dict[str, Any]:
    """A dead letter for display (listings, dashboards, logs): its fields without the
    payload, plus its message's args and kwargs with the secrets in ``names`` masked.

    The letter itself keeps the real payload, which replay() needs. Positional
    arguments are matched by the task's parameter names when ``registry`` knows it.
    """
    message = letter.message
    args: Any = None
    kwargs: Any = None
    if message is not None:
        spec = registry.find(message.task) if registry is not None else None
        params = positional_names(spec.func) if spec is not None else ()
        args, kwargs = redact(list(message.args), message.kwargs, names, params)
    return {"id": letter.id, "queue": letter.queue, "task": letter.task, "reason": letter.reason,
            "attempt": letter.attempt, "delivery_count": letter.delivery_count,
            "error_type": letter.error_type, "error_message": letter.error_message,
            "traceback": letter.traceback, "dead_ms": letter.dead_ms,
            "args": args, "kwargs": kwargs}


class DeadLetters:
    """The dead letters of a broker's queues (``Client.dead_letters`` composes one)."""

    def __init__(self, *, broker: Broker, registry: TaskRegistry, default_queue: str,
                 redact: Sequence[str] = DEFAULT_REDACT) -> None:
        self.broker = broker
        self.registry = registry  # for shown(): positional arguments by parameter name
        self.default_queue = default_queue
        self.redact = tuple(redact)  # names masked by shown(); never in the stored payload

    def shown(self, letter: DeadLetter) -> dict[str, Any]:
        """``shown(letter)`` with this listing's names and registry."""
        return shown(letter, self.redact, self.registry)

    def _queue(self, queue: str | None) -> str:
        return queue or self.default_queue

    # -- sync ------------------------------------------------------------------

    def list(self, queue: str | None = None, *, limit: int = 100, offset: int = 0,
             **filters: Any) -> builtins.list[DeadLetter]:
        """Newest first."""
        q, f = self._queue(queue), Filter(**filters)  # type: ignore[arg-type]
        ids = self.broker.dead_letter_ids(q, *f.window_ms())
        matching: list[DeadLetter] = []
        for start in range(0, len(ids), BATCH):
            bodies = self.broker.dead_letter_bodies(q, ids[start:start + BATCH])
            matching += [x for x in _letters(bodies) if f.matches(x)]
            if len(matching) >= offset + limit:
                break
        return matching[offset:offset + limit]

    def get(self, message_id: str, queue: str | None = None) -> DeadLetter | None:
        (body,) = self.broker.dead_letter_bodies(self._queue(queue), [message_id])
        return DeadLetter.from_bytes(body) if body else None

    def count(self, queue: str | None = None, **filters: Any) -> int:
        f = Filter(**filters)  # type: ignore[arg-type]
        if f.by_score_only:
            return len(self.broker.dead_letter_ids(self._queue(queue), *f.window_ms()))
        return len(self.list(queue, limit=10**12, **filters))

    def replay(self, ids: str | Sequence[str], queue: str | None = None, *,
               new_id: bool = False) -> int:
        """Put dead letters back on their queue with a fresh attempt budget."""
        q = self._queue(queue)
        ids = [ids] if isinstance(ids, str) else list(ids)
        done = 0
        for start in range(0, len(ids), BATCH):
            letters = _letters(self.broker.dead_letter_bodies(q, ids[start:start + BATCH]))
            done += self.broker.replay_dead_letters(q, _replayable(letters, new_id))
        return done

    def replay_all(self, queue: str | None = None, *, new_id: bool = False,
                   **filters: Any) -> int:
        letters = self.list(queue, limit=10**12, **filters)
        return self.replay([x.id for x in letters], queue, new_id=new_id)

    def purge(self, queue: str | None = None, ids: Sequence[str] | None = None,
              **filters: Any) -> int:
        """Delete dead letters: the given ids, those matching filters, or all of them."""
        q = self._queue(queue)
        if ids is None and not filters:
            return self.broker.purge_dead_letters(q)
        if ids is None:
            ids = [x.id for x in self.list(queue, limit=10**12, **filters)]
        return sum(self.broker.remove_dead_letters(q, ids[s:s + BATCH])
                   for s in range(0, len(ids), BATCH))

    # -- async -------------------------------------------------------------------

    async def alist(self, queue: str | None = None, *, limit: int = 100, offset: int = 0,
                    **filters: Any) -> builtins.list[DeadLetter]:
        q, f = self._queue(queue), Filter(**filters)  # type: ignore[arg-type]
        ids = await self.broker.adead_letter_ids(q, *f.window_ms())
        matching: list[DeadLetter] = []
        for start in range(0, len(ids), BATCH):
            bodies = await self.broker.adead_letter_bodies(q, ids[start:start + BATCH])
            matching += [x for x in _letters(bodies) if f.matches(x)]
            if len(matching) >= offset + limit:
                break
        return matching[offset:offset + limit]

    async def aget(self, message_id: str, queue: str | None = None) -> DeadLetter | None:
        (body,) = await self.broker.adead_letter_bodies(self._queue(queue), [message_id])
        return DeadLetter.from_bytes(body) if body else None

    async def acount(self, queue: str | None = None, **filters: Any) -> int:
        f = Filter(**filters)  # type: ignore[arg-type]
        if f.by_score_only:
            return len(await self.broker.adead_letter_ids(self._queue(queue), *f.window_ms()))
        return len(await self.alist(queue, limit=10**12, **filters))

    async def areplay(self, ids: str | Sequence[str], queue: str | None = None, *,
                      new_id: bool = False) -> int:
        q = self._queue(queue)
        ids = [ids] if isinstance(ids, str) else list(ids)
        done = 0
        for start in range(0, len(ids), BATCH):
            letters = _letters(await self.broker.adead_letter_bodies(q, ids[start:start + BATCH]))
            done += await self.broker.areplay_dead_letters(q, _replayable(letters, new_id))
        return done

    async def areplay_all(self, queue: str | None = None, *, new_id: bool = False,
                          **filters: Any) -> int:
        letters = await self.alist(queue, limit=10**12, **filters)
        return await self.areplay([x.id for x in letters], queue, new_id=new_id)

    async def apurge(self, queue: str | None = None, ids: Sequence[str] | None = None,
                     **filters: Any) -> int:
        q = self._queue(queue)
        if ids is None and not filters:
            return await self.broker.apurge_dead_letters(q)
        if ids is None:
            ids = [x.id for x in await self.alist(queue, limit=10**12, **filters)]
        total = 0
        for s in range(0, len(ids), BATCH):
            total += await self.broker.aremove_dead_letters(q, ids[s:s + BATCH])
        return total
