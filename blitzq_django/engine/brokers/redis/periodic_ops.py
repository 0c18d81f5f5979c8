"""Sans-I/O operations of periodic tasks (engine/scheduler): the occurrence claim
(periodic.lua) and the reads behind ``Client.schedules()``."""

from __future__ import annotations

from collections.abc import Sequence

from . import scripts
from .keys import Keyspace, QueueKeys
from .ops import Arg, Op

#: One occurrence to dispatch: (occurrence ms, message id, encoded message,
#: encoded record or b"", encoded event or b"").
Occurrence = tuple[int, str, bytes, bytes, bytes]


def claim(keys: QueueKeys, name: str, through_ms: int, occurrences: Sequence[Occurrence], *,
          info: bytes, record_ttl: int, events_maxlen: int, mode: str = "s") -> Op:
    """Mark every occurrence of schedule ``name`` up to ``through_ms`` handled and dispatch
    those of ``occurrences`` after the one stored, atomically (periodic.lua); parsed to
    (dispatched, latest occurrence handled before, or -1). ``keys``: the message's lane."""
    op_keys: list[str] = [keys.periodic_claims, keys.periodic_last,
                          keys.stream if mode == "s" else keys.list, keys.events]
    args: list[Arg] = [name, through_ms, mode, record_ttl, events_maxlen, info]
    for occurrence_ms, message_id, payload, record, event in occurrences:
        op_keys.append(keys.record(message_id))
        args += (occurrence_ms, payload, record, event)
    return Op(script=scripts.PERIODIC, keys=op_keys, args=args,
              parse=lambda reply: (int(reply[0]), int(reply[1])))


def handled(keys: QueueKeys, names: Sequence[str]) -> Op:
    """The latest occurrence handled of each schedule (None: never), in order."""
    return Op(command=("HMGET", keys.periodic_claims, *names),
              parse=lambda reply: [None if v is None else int(v) for v in reply])


def last_dispatches(keys: QueueKeys, names: Sequence[str]) -> Op:
    """The packed last dispatch of each schedule (None: never), in order."""
    return Op(command=("HMGET", keys.periodic_last, *names), parse=list)


def records(keys: QueueKeys, message_ids: Sequence[str]) -> Op:
    return Op(command=("MGET", *(keys.record(i) for i in message_ids)), parse=list)


def schedules_version(keyspace: Keyspace) -> Op:
    return Op(command=("GET", keyspace.schedules_version),
              parse=lambda reply: int(reply or 0))


def schedules_changed(keyspace: Keyspace) -> list[Op]:
    """Bump the version, then tell the listening schedulers (two commands, one trip)."""
    return [Op(command=("INCR", keyspace.schedules_version), parse=int),
            Op(command=("PUBLISH", keyspace.schedules_channel, "changed"), parse=int)]


