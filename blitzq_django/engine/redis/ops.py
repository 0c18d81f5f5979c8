"""Sans-I/O Redis operations: each is (script or command, keys, args) + reply parser.

The sync and the async store execute these same values, so every Redis flow
exists once. Nothing here touches a connection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import msgpack

from . import scripts
from .keys import GROUP, Keyspace, QueueKeys
from .scripts import Script

Arg = str | bytes | int | float

#: How long a settle batch's reply is kept for a re-send of the same batch. Longer than
#: any retry of one write; a batch re-sent later than this is refused as not owned.
RECEIPT_TTL_S = 300


class Op(NamedTuple):
    """One Redis operation. A NamedTuple: built on every enqueue, so it must be cheap."""

    command: tuple[Arg, ...] = ()  # a plain command, when script is None
    script: Script | None = None
    keys: Sequence[str] = ()
    args: Sequence[Arg] = ()
    parse: Callable[[Any], Any] | None = None

    def result(self, reply: Any) -> Any:
        return self.parse(reply) if self.parse is not None else reply


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


# -- producing ---------------------------------------------------------------


def xadd(keys: QueueKeys, payload: bytes) -> Op:
    return Op(command=("XADD", keys.stream, "*", "m", payload), parse=_text)


def lpush(keys: QueueKeys, payload: bytes) -> Op:
    return Op(command=("LPUSH", keys.list, payload))


def enqueue(
    keys: QueueKeys,
    *,
    payload: bytes,
    message_id: str,
    due_ms: int = 0,
    record: bytes = b"",
    record_ttl: int = 0,
    idempotency_key: str | None = None,
    idempotency_ttl: int = 0,
    mode: str = "s",
) -> Op:
    unique = keys.unique(idempotency_key) if idempotency_key else keys.unique("-")
    return Op(
        script=scripts.ENQUEUE,
        keys=(keys.stream if mode == "s" else keys.list, keys.schedule, keys.schedule_data,
              keys.record(message_id), unique),
        args=(payload, message_id, due_ms, record, record_ttl,
              idempotency_ttl if idempotency_key else "", mode),
        parse=lambda reply: (bool(reply[0]), _text(reply[1])),
    )


def create_group(keys: QueueKeys) -> Op:
    # From id 0: messages enqueued before the first worker started are read too.
    return Op(command=("XGROUP", "CREATE", keys.stream, GROUP, "0", "MKSTREAM"))


# -- consuming ---------------------------------------------------------------


def read_group(
    queue_keys: Sequence[QueueKeys], consumer: str, count: int, block_ms: int | None
) -> Op:
    """XREADGROUP over several queues; reply parsed to [(stream, entry id, payload)]."""
    command: list[Arg] = ["XREADGROUP", "GROUP", GROUP, consumer, "COUNT", count]
    if block_ms is not None:
        command += ["BLOCK", block_ms]
    command += ["STREAMS", *(k.stream for k in queue_keys), *(">" for _ in queue_keys)]
    return Op(command=tuple(command), parse=_parse_read)


def _parse_read(reply: Any) -> list[tuple[str, str, bytes | None]]:
    out: list[tuple[str, str, bytes | None]] = []
    if not reply:
        return out
    # RESP2 gives a list of [stream, entries]; RESP3 a dict.
    items = reply.items() if isinstance(reply, dict) else reply
    for stream, entries in items:
        stream = _text(stream)
        for entry_id, fields in entries:
            # The usual entry is exactly [b"m", payload] (RESP2): read it without a call.
            if type(fields) is list and len(fields) == 2 and fields[0] == b"m":
                payload = fields[1]
            else:
                payload = _field(fields, b"m")
            out.append((stream, entry_id.decode() if type(entry_id) is bytes else entry_id,
                        payload))
    return out


def _field(fields: Any, name: bytes) -> bytes | None:
    if isinstance(fields, dict):
        return fields.get(name)
    if isinstance(fields, list):
        for i in range(0, len(fields) - 1, 2):
            if fields[i] == name:
                return fields[i + 1]
    return None


def complete(
    keys: QueueKeys,
    consumer: str,
    items: Sequence[tuple[str, str, str, bytes, int, bytes, int]],
    *,
    record_ttl: int,
    dead_letter_max: int,
    now_ms: int,
    token: str,
) -> Op:
    """Settle deliveries: items are (kind, entry id, message id, record, notify, body, due).

    ``token`` names this batch: sent again with the same token, it answers as the first
    time and changes nothing.
    """
    return Op(
        script=scripts.COMPLETE,
        keys=(keys.stream, keys.schedule, keys.schedule_data, keys.dead_letters,
              keys.dead_letter_data, keys.receipt(token)),
        args=(GROUP, consumer, record_ttl, dead_letter_max, now_ms, keys.record(""),
              # Old-style msgpack (no bin type): Redis's Lua cmsgpack cannot read bin.
              keys.done_channel(""), msgpack.packb(items, use_bin_type=False),
              *_id_range([item[1] for item in items]), RECEIPT_TTL_S),
        parse=lambda reply: [bool(r) for r in reply],
    )


def _id_range(entry_ids: Sequence[str]) -> tuple[str, str]:
    """Lowest and highest stream entry id (ids compare as numbers, not as text)."""
    # Each id parsed once, then min and max in C: this runs for every settled message.
    keys = [(int(ms), int(seq or 0)) for ms, _, seq in (e.partition("-") for e in entry_ids)]
    low, high = min(keys), max(keys)
    return f"{low[0]}-{low[1]}", f"{high[0]}-{high[1]}"


def renew(keys: QueueKeys, consumer: str, entry_ids: Sequence[str]) -> Op:
    return Op(
        script=scripts.RENEW,
        keys=(keys.stream,),
        args=(GROUP, consumer, *entry_ids),
        parse=lambda reply: [_text(r) for r in reply],
    )


def recover(keys: QueueKeys, consumer: str, min_idle_ms: int, count: int) -> Op:
    def parse(reply: Any) -> tuple[list[tuple[str, bytes, int]], list[str]]:
        claimed = [(_text(e[0]), e[1], int(e[2])) for e in reply[0]]
        return claimed, [_text(d) for d in reply[1]]

    return Op(
        script=scripts.RECOVER,
        keys=(keys.stream,),
        args=(GROUP, consumer, min_idle_ms, count),
        parse=parse,
    )


def promote(keys: QueueKeys, now_ms: int, limit: int, mode: str = "s") -> Op:
    return Op(
        script=scripts.PROMOTE,
        keys=(keys.stream if mode == "s" else keys.list, keys.schedule, keys.schedule_data),
        args=(now_ms, limit, mode),
        parse=lambda reply: (int(reply[0]), int(reply[1])),
    )


def retire(keys: QueueKeys, consumer: str) -> Op:
    return Op(script=scripts.RETIRE, keys=(keys.stream,), args=(GROUP, consumer), parse=bool)


def prune(keys: QueueKeys, min_idle_ms: int) -> Op:
    return Op(script=scripts.PRUNE, keys=(keys.stream,), args=(GROUP, min_idle_ms), parse=int)


# -- dead letters -------------------------------------------------------------


def dead_letter_ids(keys: QueueKeys, min_ms: int, max_ms: int) -> Op:
    """Ids newest first, dead-lettered between min_ms and max_ms."""
    return Op(command=("ZREVRANGEBYSCORE", keys.dead_letters, max_ms, min_ms),
              parse=lambda reply: [_text(r) for r in reply])


def dead_letter_bodies(keys: QueueKeys, ids: Sequence[str]) -> Op:
    return Op(command=("HMGET", keys.dead_letter_data, *ids))


def replay_dead_letters(keys: QueueKeys, items: Sequence[tuple[str, str, bytes]],
                        mode: str = "s") -> Op:
    """Items are (dead letter id, id of the message to enqueue, its encoding)."""
    args: list[Arg] = ["replay", mode]
    for dead_id, _new_id, payload in items:
        args += [dead_id, payload]
    return Op(script=scripts.DEAD_LETTERS,
              keys=(keys.stream if mode == "s" else keys.list, keys.dead_letters,
                    keys.dead_letter_data, *(keys.record(new_id) for _, new_id, _ in items)),
              args=args, parse=int)


def remove_dead_letters(keys: QueueKeys, ids: Sequence[str]) -> Op:
    return Op(script=scripts.DEAD_LETTERS,
              keys=(keys.stream, keys.dead_letters, keys.dead_letter_data),
              args=("remove", "s", *ids), parse=int)


def purge_dead_letters(keys: QueueKeys) -> Op:
    return Op(script=scripts.DEAD_LETTERS,
              keys=(keys.stream, keys.dead_letters, keys.dead_letter_data),
              args=("purge", "s"), parse=int)


# -- reading state -----------------------------------------------------------


def get(key: str) -> Op:
    return Op(command=("GET", key))


def zscore(key: str, member: str) -> Op:
    return Op(command=("ZSCORE", key, member), parse=lambda r: None if r is None else float(r))


def hget(key: str, field: str) -> Op:
    return Op(command=("HGET", key, field))


# -- workers and stats ----------------------------------------------------------


def heartbeat(keyspace: Keyspace, name: str, info: bytes, now_ms: int, ttl_ms: int) -> Op:
    return Op(script=scripts.HEARTBEAT, keys=(keyspace.workers, keyspace.worker(name)),
              args=("beat", name, now_ms, info, ttl_ms))


def leave(keyspace: Keyspace, name: str, now_ms: int) -> Op:
    return Op(script=scripts.HEARTBEAT, keys=(keyspace.workers, keyspace.worker(name)),
              args=("leave", name, now_ms))


def workers(keyspace: Keyspace, now_ms: int) -> Op:
    return Op(script=scripts.WORKERS, keys=(keyspace.workers,),
              args=(now_ms, keyspace.worker("")), parse=list)


def stats(keys: QueueKeys, now_ms: int) -> Op:
    """{ready, in_flight, scheduled, dead_letters, consumers, oldest_ready_age_ms}."""
    def parse(reply: Any) -> dict[str, int | None]:
        ready, in_flight, scheduled, dead, consumers, age = (int(x) for x in reply)
        return {"ready": ready, "in_flight": in_flight, "scheduled": scheduled,
                "dead_letters": dead, "consumers": consumers,
                "oldest_ready_age_ms": age if age >= 0 else None}

    return Op(script=scripts.STATS, keys=(keys.stream, keys.schedule, keys.dead_letters),
              args=(GROUP, now_ms), parse=parse)


def purge(keys: QueueKeys, force: bool, dead_letters: bool) -> Op:
    """{ready, scheduled, dead_letters, in_flight}; ready is -1 when refused (in flight),
    -2 when the queue has no key at all."""
    def parse(reply: Any) -> dict[str, int]:
        ready, scheduled, dead, in_flight = (int(x) for x in reply)
        return {"ready": ready, "scheduled": scheduled, "dead_letters": dead,
                "in_flight": in_flight}

    return Op(script=scripts.PURGE,
              keys=(keys.stream, keys.schedule, keys.schedule_data, keys.dead_letters,
                    keys.dead_letter_data),
              args=(GROUP, int(force), int(dead_letters)), parse=parse)
