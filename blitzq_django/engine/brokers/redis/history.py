"""The history writer's reads and the history's health on Redis
(capabilities.HistoryStore): events_read.lua (read, count what was lost, trim), the
health hash (``QueueKeys.history_health``) and the writers' consumer group lag."""

from __future__ import annotations

from typing import Any

from ...core.ids import now_ms
from ...errors import BrokerError
from ..capabilities import EventsRead
from . import ops, scripts
from .ops import Op


class RedisHistoryStore:
    def __init__(self, broker: Any) -> None:
        self._broker = broker

    def read(self, queue: str, group: str, consumer: str, count: int, keep_events: int,
             block_ms: int | None) -> EventsRead:
        keys = self._broker.keys.queue(queue)
        run = self._broker.sync.run

        def counted() -> ops.GroupRead:
            return run(ops.events_read_counted(keys, queue, group, consumer, count,
                                               keep_events, now_ms()))

        found = counted()
        lost, gaps, skipped = found.lost, found.gaps, list(found.skipped)
        if not found.events and count and block_ms:
            run(ops.events_wait(keys, found.last, block_ms))
            found = counted()
            lost, gaps = lost + found.lost, gaps + found.gaps
            skipped += found.skipped
        return EventsRead(found.events, lost, gaps, skipped)

    def add_unwritable(self, queue: str, time_ms: int, text: str) -> None:
        self._broker.sync.run(Op(script=scripts.UNWRITABLE,
                                 keys=(self._broker.keys.queue(queue).history_health,),
                                 args=(time_ms, text)))

    def health(self, queue: str, group: str) -> tuple[dict[str, str], int | None]:
        keys = self._broker.keys.queue(queue)
        fields = self._broker.sync.run(ops.history_health(keys))
        try:
            groups = self._broker.sync.run(ops.events_groups(keys))
        except BrokerError:  # no stream yet
            groups = []
        return fields, _lag(groups, group)


def _lag(groups: list[dict[str, Any]], group: str) -> int | None:
    for found in groups:
        if found.get("name") == group:
            lag = found.get("lag")
            try:
                return int(lag) if lag not in (None, "") else None
            except (TypeError, ValueError):
                return None
    return None
