"""Workflows on Redis (capabilities.WorkflowStore): one hash per workflow under its own
hash tag (``Keyspace.workflow``), every step one call of ``workflow.lua``; the events of
a workflow go to a queue's events stream as a command of their own (another slot)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ...core.workflow import Advance, Launch, Node
from .keys import Keyspace
from .ops import Arg, Op
from .scripts import WORKFLOW
from .store import mapped_errors

#: A waiter re-reads the state at least this often (a missed publish costs no more).
POLL_S = 2.0
_KINDS = {"T": "task", "C": "chain", "G": "group", "D": "chord"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _advance(reply: Any) -> Advance:
    status, state, flat, inputs, finished, home, root, created = reply
    launches = []
    for i in range(0, len(flat), 3):
        node = _text(flat[i])
        at = int(flat[i + 2])
        launches.append(Launch(int(node) if node.isdigit() else node, flat[i + 1],
                               inputs[at - 1] if at else None))
    return Advance(_text(status), _text(state), launches, bool(finished), _text(home),
                   _KINDS.get(_text(root), ""), int(created or 0))


def start(keys: Keyspace, workflow_id: str, now_ms: int, home: str, nodes: Sequence[Node],
          members: Mapping[int, bytes], on_error: bytes | None) -> Op:
    args: list[Arg] = ["start", workflow_id, now_ms, home, on_error or b"", len(nodes)]
    args += [shape.pack() for shape in nodes]
    for n, member in members.items():
        args += [n, member]
    return Op(script=WORKFLOW, keys=(keys.workflow(workflow_id),
                                     keys.workflow_channel(workflow_id)),
              args=args, parse=_advance)


def settle(keys: Keyspace, workflow_id: str, at: int | str, state: str, value: bytes,
           outcome: bytes, failure: bytes, now_ms: int, ttl_s: int) -> Op:
    return Op(script=WORKFLOW, keys=(keys.workflow(workflow_id),
                                     keys.workflow_channel(workflow_id)),
              args=("settle", str(at), state, value, outcome, failure, now_ms, ttl_s),
              parse=_advance)


def _cancelled(reply: Any) -> tuple[str, list[bytes]]:
    return _text(reply[0]), list(reply[1])


def cancel(keys: Keyspace, workflow_id: str, now_ms: int, ttl_s: int) -> Op:
    return Op(script=WORKFLOW, keys=(keys.workflow(workflow_id),
                                     keys.workflow_channel(workflow_id)),
              args=("cancel", now_ms, ttl_s), parse=_cancelled)


def _hash(reply: Any) -> dict[str, bytes]:
    if isinstance(reply, dict):
        return {_text(k): v for k, v in reply.items()}
    items = list(reply or [])
    return {_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


def read(keys: Keyspace, workflow_id: str) -> Op:
    return Op(command=("HGETALL", keys.workflow(workflow_id)), parse=_hash)


def fields(keys: Keyspace, workflow_id: str, names: Sequence[str]) -> Op:
    return Op(command=("HMGET", keys.workflow(workflow_id), *names), parse=list)


def emit(keys: Keyspace, queue: str, event: bytes, maxlen: int) -> Op:
    return Op(command=("XADD", keys.queue(queue).events, "MAXLEN", "~", maxlen, "*",
                       "e", event))


class RedisWorkflowStore:
    def __init__(self, broker: Any) -> None:
        self._broker = broker

    @property
    def _keys(self) -> Keyspace:
        return self._broker.keys  # type: ignore[no-any-return]

    def start(self, workflow_id: str, now_ms: int, home: str, nodes: Sequence[Node],
              members: Mapping[int, bytes], on_error: bytes | None) -> Advance:
        return self._broker.sync.run(start(self._keys, workflow_id, now_ms, home, nodes,  # type: ignore[no-any-return]
                                           members, on_error))

    async def astart(self, workflow_id: str, now_ms: int, home: str, nodes: Sequence[Node],
                     members: Mapping[int, bytes], on_error: bytes | None) -> Advance:
        return await self._broker.aio.run(start(self._keys, workflow_id, now_ms, home,  # type: ignore[no-any-return]
                                                nodes, members, on_error))

    def settle(self, workflow_id: str, at: int | str, state: str, value: bytes,
               outcome: bytes, failure: bytes, now_ms: int) -> Advance:
        return self._broker.sync.run(settle(self._keys, workflow_id, at, state, value,  # type: ignore[no-any-return]
                                            outcome, failure, now_ms,
                                            self._broker.record_ttl))

    async def asettle(self, workflow_id: str, at: int | str, state: str, value: bytes,
                      outcome: bytes, failure: bytes, now_ms: int) -> Advance:
        return await self._broker.aio.run(settle(self._keys, workflow_id, at, state, value,  # type: ignore[no-any-return]
                                                 outcome, failure, now_ms,
                                                 self._broker.record_ttl))

    async def asettle_many(self, items: Sequence[tuple[str, int | str, str, bytes, bytes,
                                                       bytes, int]]) -> list[Advance]:
        ttl = self._broker.record_ttl
        return await self._broker.aio.run_many(  # type: ignore[no-any-return]
            [settle(self._keys, *item, ttl) for item in items])

    def cancel(self, workflow_id: str, now_ms: int) -> tuple[str, list[bytes]]:
        return self._broker.sync.run(cancel(self._keys, workflow_id, now_ms,  # type: ignore[no-any-return]
                                            self._broker.record_ttl))

    async def acancel(self, workflow_id: str, now_ms: int) -> tuple[str, list[bytes]]:
        return await self._broker.aio.run(cancel(self._keys, workflow_id, now_ms,  # type: ignore[no-any-return]
                                                 self._broker.record_ttl))

    def read(self, workflow_id: str) -> dict[str, bytes]:
        return self._broker.sync.run(read(self._keys, workflow_id))  # type: ignore[no-any-return]

    async def aread(self, workflow_id: str) -> dict[str, bytes]:
        return await self._broker.aio.run(read(self._keys, workflow_id))  # type: ignore[no-any-return]

    def fields(self, workflow_id: str, names: Sequence[str]) -> list[bytes | None]:
        return self._broker.sync.run(fields(self._keys, workflow_id, names))  # type: ignore[no-any-return]

    async def afields(self, workflow_id: str, names: Sequence[str]) -> list[bytes | None]:
        return await self._broker.aio.run(fields(self._keys, workflow_id, names))  # type: ignore[no-any-return]

    def wait(self, workflow_id: str, timeout: float) -> str:
        deadline = time.monotonic() + max(timeout, 0.0)
        pubsub: Any = None
        with mapped_errors(self._broker.url):
            try:
                while True:
                    (state,) = self.fields(workflow_id, ["state"])
                    text = _text(state) if state is not None else ""
                    remaining = deadline - time.monotonic()
                    if text in ("succeeded", "failed", "cancelled") or remaining <= 0:
                        return text
                    if pubsub is None:
                        pubsub = self._broker.sync.client.pubsub(
                            ignore_subscribe_messages=True)
                        pubsub.subscribe(self._keys.workflow_channel(workflow_id))
                    pubsub.get_message(timeout=min(remaining, POLL_S))
            finally:
                if pubsub is not None:
                    pubsub.close()

    async def await_final(self, workflow_id: str, timeout: float) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        with mapped_errors(self._broker.url):
            pubsub = self._broker.aio.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._keys.workflow_channel(workflow_id))
                while True:
                    (state,) = await self.afields(workflow_id, ["state"])
                    text = _text(state) if state is not None else ""
                    remaining = deadline - loop.time()
                    if text in ("succeeded", "failed", "cancelled") or remaining <= 0:
                        return text
                    await pubsub.get_message(timeout=min(remaining, POLL_S))
            finally:
                await pubsub.aclose()

    def emit(self, queue: str, event: bytes) -> None:
        if self._broker.events_maxlen:
            self._broker.sync.run(emit(self._keys, queue, event, self._broker.events_maxlen))

    async def aemit(self, queue: str, event: bytes) -> None:
        if self._broker.events_maxlen:
            await self._broker.aio.run(emit(self._keys, queue, event,
                                            self._broker.events_maxlen))

