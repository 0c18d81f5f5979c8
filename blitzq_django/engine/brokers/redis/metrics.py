"""Metrics on Redis (capabilities.MetricsStore): the counters hash (``QueueKeys.
metrics``) and the enqueue times waiting for a start (``QueueKeys.metrics_starts``), a
folded batch added in one step by metrics_add.lua."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import scripts
from .ops import Arg, Op
from .progress import _hash, _text


def add(metrics: str, starts: str, incr: Mapping[str, int], cursor: str,
        gone: Sequence[str], enqueued: Mapping[str, int], max_starts: int) -> Op:
    args: list[Arg] = [cursor, max_starts, len(incr)]
    for name, n in incr.items():
        args += (name, n)
    args += (len(gone), *gone)
    for message_id, ms in enqueued.items():
        args += (message_id, ms)
    return Op(script=scripts.METRICS_ADD, keys=(metrics, starts), args=args)


class RedisMetricsStore:
    def __init__(self, broker: Any) -> None:
        self._broker = broker

    def read(self, queue: str) -> dict[str, str]:
        return self._broker.sync.run(Op(command=("HGETALL",
                                                 self._broker.keys.queue(queue).metrics),
                                        parse=_hash))

    def cursor(self, queue: str) -> str:
        found = self._broker.sync.run(Op(command=("HGET", self._broker.keys.queue(queue).metrics,
                                                  "cursor")))
        return _text(found or b"0")

    def enqueue_times(self, queue: str, message_ids: Sequence[str]) -> list[int | None]:
        found = self._broker.sync.run(Op(command=(
            "HMGET", self._broker.keys.queue(queue).metrics_starts, *message_ids)))
        return [None if at is None else int(at) for at in found]

    def add(self, queue: str, incr: Mapping[str, int], cursor: str, gone: Sequence[str],
            enqueued: Mapping[str, int], max_starts: int) -> None:
        keys = self._broker.keys.queue(queue)
        self._broker.sync.run(add(keys.metrics, keys.metrics_starts, incr, cursor, gone,
                                  enqueued, max_starts))
