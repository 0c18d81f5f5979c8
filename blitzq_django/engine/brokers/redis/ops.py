"""Sans-I/O Redis operations: each is (script or command, keys, args) + reply parser.

The sync and the async store execute these same values, so every Redis flow
exists once. Nothing here touches a connection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import msgpack

from ...core import events
from ...core.events import Event
from ...core.message import decode
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


def add_seen_queues(keyspace: Keyspace, queues: Sequence[str]) -> Op:
    """Record queues as written to (a command of its own: the set is under the
    namespace's hash tag, not the queue's)."""
    return Op(command=("SADD", keyspace.seen_queues, *queues))


def seen_queues(keyspace: Keyspace) -> Op:
    """Every queue ever recorded as written to, sorted."""
    return Op(command=("SMEMBERS", keyspace.seen_queues),
              parse=lambda reply: sorted(_text(q) for q in reply))


def forget_seen_queue(keyspace: Keyspace, queue: str) -> Op:
    return Op(command=("SREM", keyspace.seen_queues, queue))


#: One message for enqueue(): (payload, message id, due ms or 0, record or b"",
#: idempotency key or None, unique key or None, task name).
EnqueueItem = tuple[bytes, str, int, bytes, "str | None", "str | None", str]


def enqueue(
    keys: QueueKeys,
    items: Sequence[EnqueueItem],
    *,
    record_ttl: int,
    idempotency_ttl: int,
    events_maxlen: int = 0,
    now_ms: int = 0,
    mode: str = "s",
    details: bool = False,
    publish: str = "PUBLISH",
) -> Op:
    """Messages of one lane in one call (enqueue.lua), each atomic with its event; parsed
    to [(written, id)]: the id already holding the key when not written. ``details``:
    each event carries its message (core/events.py ``message_detail``). ``publish``:
    "SPUBLISH" on a Redis Cluster (the wake channel is the queue's shard channel)."""
    op_keys: list[str] = [keys.stream if mode == "s" else keys.list, keys.schedule,
                          keys.schedule_data, keys.events]
    # ARGV[5]: where a new earliest delayed message is published (promoters wake at once)
    args: list[Arg] = [mode, record_ttl, idempotency_ttl, events_maxlen, keys.wake_channel,
                       publish]
    unused = keys.unique("-")
    pack = events.packer().pack
    for payload, message_id, due_ms, record, idempotency_key, unique_key, task in items:
        op_keys += (keys.record(message_id),
                    keys.unique(idempotency_key) if idempotency_key else unused,
                    keys.unique_marker(unique_key) if unique_key else unused)
        flags = ("i" if idempotency_key else "") + ("u" if unique_key else "")
        if not events_maxlen:
            event = b""
        elif details:
            event = pack([events.SCHEDULED if due_ms else events.ENQUEUED, message_id, task,
                          now_ms, None, None, None, None, events.message_detail(payload)])
        else:
            event = pack([events.SCHEDULED if due_ms else events.ENQUEUED, message_id, task,
                          now_ms, None, None, None, None])
        args += (payload, message_id, due_ms, record, flags, event)

    def parse(reply: Any) -> list[tuple[bool, str]]:
        return [(bool(reply[i]), _text(reply[i + 1])) for i in range(0, len(reply), 2)]

    return Op(script=scripts.ENQUEUE, keys=op_keys, args=args, parse=parse)


def enqueue_plain(keys: QueueKeys, items: Sequence[tuple[bytes, str, str]], *,
                  events_maxlen: int, now_ms: int, mode: str = "s",
                  details: bool = False) -> Op:
    """Plain messages of one lane with their "enqueued" events (enqueue_plain.lua): items
    are (payload, message id, task); parsed to how many were written. ``details``: each
    event carries its message (core/events.py ``message_detail``)."""
    args: list[Arg] = [mode, events_maxlen]
    pack = events.packer().pack
    if details:
        detail = events.message_detail
        for payload, message_id, task in items:
            args += (payload, pack([events.ENQUEUED, message_id, task, now_ms, None, None,
                                    None, None, detail(payload)]))
        items = ()
    for payload, message_id, task in items:
        args += (payload, pack([events.ENQUEUED, message_id, task, now_ms, None, None, None,
                                None]))
    return Op(script=scripts.ENQUEUE_PLAIN,
              keys=(keys.stream if mode == "s" else keys.list, keys.events), args=args,
              parse=int)


def wait_replicas(replicas: int, timeout_ms: int, key: str = "") -> Op:
    """WAIT, sent right after writes on their connection (no round trip of its own): it
    answers once ``replicas`` replicas have confirmed every write sent before it on that
    connection, or after ``timeout_ms``; parsed to how many confirmed. ``key``: a key the
    writes touched (a cluster client sends the WAIT to that key's node; WAIT counts only
    the writes of its own connection)."""
    return Op(command=("WAIT", replicas, timeout_ms), keys=(key,) if key else (), parse=int)


def create_group(keys: QueueKeys) -> Op:
    # From id 0: messages enqueued before the first worker started are read too.
    return Op(command=("XGROUP", "CREATE", keys.stream, GROUP, "0", "MKSTREAM"))


# -- consuming ---------------------------------------------------------------


def read_group(
    queue_keys: Sequence[QueueKeys], consumer: str, count: int, block_ms: int | None
) -> Op:
    """XREADGROUP over several streams (lanes); reply parsed to [(stream, entry id, payload)].

    COUNT applies to each stream: this is the blocking read of an idle queue, where any
    lane's first message must wake the worker. Under a backlog, fetch() reads instead.
    """
    command: list[Arg] = ["XREADGROUP", "GROUP", GROUP, consumer, "COUNT", count]
    if block_ms is not None:
        command += ["BLOCK", block_ms]
    command += ["STREAMS", *(k.stream for k in queue_keys), *(">" for _ in queue_keys)]
    return Op(command=tuple(command), parse=_parse_read)


def fetch(lanes: Sequence[QueueKeys], consumer: str, count: int, mode: str = "s") -> Op:
    """Up to ``count`` new entries of one queue, highest lane first, without blocking;
    parsed to [(lane index, entry id, payload)]. Fast mode (``mode`` "l"): popped from
    the lists, parsed to [(lane index, "", payload)] (a list entry has no id)."""
    def parse(reply: Any) -> list[tuple[int, str, bytes | None]]:
        out: list[tuple[int, str, bytes | None]] = []
        for index, entries in reply:
            for entry_id, fields in entries:
                if type(fields) is list and len(fields) == 2 and fields[0] == b"m":
                    payload = fields[1]
                else:
                    payload = _field(fields, b"m")
                out.append((index - 1, entry_id.decode() if type(entry_id) is bytes
                            else entry_id, payload))
        return out

    def parse_popped(reply: Any) -> list[tuple[int, str, bytes | None]]:
        return [(index - 1, "", payload) for index, popped in reply for payload in popped]

    if mode == "l":
        return Op(script=scripts.FETCH, keys=tuple(k.list for k in lanes),
                  args=(GROUP, consumer, count, mode), parse=parse_popped)
    return Op(script=scripts.FETCH, keys=tuple(k.stream for k in lanes),
              args=(GROUP, consumer, count, mode), parse=parse)


def pop_blocking(lanes: Sequence[QueueKeys], block_ms: int) -> Op:
    """Fast mode, nothing ready: BRPOP on every lane's list (the first key first, so the
    highest lane wins a tie), waiting up to ``block_ms``; parsed to (key, payload) or
    None."""
    def parse(reply: Any) -> tuple[str, bytes] | None:
        if not reply:
            return None
        return _text(reply[0]), reply[1]

    # BRPOP's timeout is in seconds (a float since Redis 6); 0 would block forever.
    return Op(command=("BRPOP", *(k.list for k in lanes), max(block_ms, 1) / 1000),
              parse=parse)


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
    items: Sequence[tuple[Any, ...]],
    *,
    record_ttl: int,
    dead_letter_max: int,
    now_ms: int,
    token: str,
    events_maxlen: int = 0,
    mode: str = "s",
    publish: str = "PUBLISH",
) -> Op:
    """Settle deliveries: items are (kind, entry id, message id, record, notify, body, due,
    unique key), and with events on also (its event, its "started" event), and for an
    attempt listed in ``consumer``'s running index a last 1: see complete.lua.

    ``token`` names this batch: sent again with the same token, it answers as the first
    time and changes nothing. Fast mode (``mode`` "l"): no ownership check and no ack
    (the messages were popped from the list); a requeue is an RPUSH. ``publish``:
    "SPUBLISH" on a Redis Cluster (notification channels are the queue's shard channels).
    """
    fast = mode == "l"
    op_keys = [keys.list if fast else keys.stream, keys.schedule, keys.schedule_data,
               keys.dead_letters, keys.dead_letter_data, keys.receipt(token), keys.events,
               keys.running(consumer)]
    # Each key the script touches is named here (Redis' rule for scripts; a cluster
    # routes by them): an item's record and unique marker, in item order.
    record, marker = keys.record(""), keys.unique_marker("")
    for item in items:
        if item[3]:
            op_keys.append(record + item[2])
        if item[7]:
            op_keys.append(marker + item[7])
    return Op(
        script=scripts.COMPLETE,
        keys=op_keys,
        args=(GROUP, consumer, record_ttl, dead_letter_max, now_ms, "",
              # Old-style msgpack (no bin type): Redis's Lua cmsgpack cannot read bin.
              keys.done_channel(""), msgpack.packb(items, use_bin_type=False),
              *(("-", "+") if fast else _id_range([item[1] for item in items])),
              RECEIPT_TTL_S, events_maxlen, "", mode, publish),
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


def recover(keys: QueueKeys, consumer: str, min_idle_ms: int, count: int,
            events_maxlen: int = 0, now_ms: int = 0) -> Op:
    def parse(reply: Any) -> tuple[list[tuple[str, bytes, int]], list[str]]:
        claimed = [(_text(e[0]), e[1], int(e[2])) for e in reply[0]]
        return claimed, [_text(d) for d in reply[1]]

    return Op(
        script=scripts.RECOVER,
        keys=(keys.stream, keys.events),
        args=(GROUP, consumer, min_idle_ms, count, events_maxlen, now_ms),
        parse=parse,
    )


#: How long the start count of a recovered entry is kept after its last start: it only
#: matters while the entry is pending, and a pending entry is recovered within minutes.
STARTS_TTL_S = 7 * 24 * 3600


def start_recovered(keys: QueueKeys, consumer: str, entry_id: str) -> Op:
    """Count a start of a recovered entry this consumer owns: its starts so far, 0 if it
    is no longer this consumer's (start.lua)."""
    return Op(script=scripts.START, keys=(keys.stream, keys.starts(entry_id)),
              args=(GROUP, consumer, entry_id, STARTS_TTL_S), parse=int)


def starts(keys: QueueKeys, entry_id: str) -> Op:
    """How many times the recovered entry started (0: never after its first delivery)."""
    return Op(command=("GET", keys.starts(entry_id)), parse=lambda r: int(r) if r else 0)


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


def take_tokens(keyspace: Keyspace, bucket: str, capacity: float, refill_per_ms: float,
                wanted: int) -> Op:
    """Take up to ``wanted`` tokens of a rate limit's bucket: (granted, wait ms for the
    rest, one token interval apart). See rate.lua."""
    return Op(script=scripts.RATE, keys=(keyspace.rate_bucket(bucket),),
              args=(capacity, refill_per_ms, wanted),
              parse=lambda reply: (int(reply[0]), int(reply[1])))


# -- dead letters -------------------------------------------------------------


def dead_letter_ids(keys: QueueKeys, min_ms: int, max_ms: int) -> Op:
    """Ids newest first, dead-lettered between min_ms and max_ms."""
    return Op(command=("ZREVRANGEBYSCORE", keys.dead_letters, max_ms, min_ms),
              parse=lambda reply: [_text(r) for r in reply])


def dead_letter_bodies(keys: QueueKeys, ids: Sequence[str]) -> Op:
    return Op(command=("HMGET", keys.dead_letter_data, *ids))


def replay_dead_letters(keys: QueueKeys, items: Sequence[tuple[str, str, bytes]],
                        mode: str = "s", events_maxlen: int = 0, now_ms: int = 0,
                        details: bool = False) -> Op:
    """Items are (dead letter id, id of the message to enqueue, its encoding)."""
    args: list[Arg] = ["replay", mode, events_maxlen]
    for dead_id, new_id, payload in items:
        head = events.peek(payload) if events_maxlen else None
        detail = [events.message_detail(payload)] if details else []
        event = events.packer().pack([events.REPLAYED, new_id, head[1] if head else "",
                                      now_ms, 1, None, None, None, *detail]
                                     ) if events_maxlen else b""
        args += [dead_id, payload, event]
    return Op(script=scripts.DEAD_LETTERS,
              keys=(keys.stream if mode == "s" else keys.list, keys.dead_letters,
                    keys.dead_letter_data, keys.events,
                    *(keys.record(new_id) for _, new_id, _ in items)),
              args=args, parse=int)


def remove_dead_letters(keys: QueueKeys, ids: Sequence[str]) -> Op:
    return Op(script=scripts.DEAD_LETTERS,
              keys=(keys.stream, keys.dead_letters, keys.dead_letter_data),
              args=("remove", "s", *ids), parse=int)


def purge_dead_letters(keys: QueueKeys) -> Op:
    return Op(script=scripts.DEAD_LETTERS,
              keys=(keys.stream, keys.dead_letters, keys.dead_letter_data),
              args=("purge", "s"), parse=int)


# -- cancellation ------------------------------------------------------------


def cancel(keyspace: Keyspace, queue: str, message_id: str, *, now_ms: int,
           revoke_ttl: int, record_ttl: int, final_states: Sequence[str], known: bool,
           record: bytes = b"", expected: bytes = b"", unique_key: str | None = None,
           task: str = "", attempt: int | None = None, events_maxlen: int = 0,
           publish: str = "PUBLISH") -> Op:
    """Cancel one message (cancel.lua): reply parsed to (outcome, detail), where detail is
    the scheduled body when the outcome is "scheduled" (call again with it as
    ``expected``), else the state found (or None)."""
    keys = keyspace.queue(queue)

    def parse(reply: Any) -> tuple[str, Any]:
        outcome, detail = _text(reply[0]), reply[1]
        if outcome == "scheduled":
            return outcome, detail
        return outcome, _text(detail) or None

    schedules = [key for lane in keys.lanes for key in (lane.schedule, lane.schedule_data)]
    return Op(
        script=scripts.CANCEL,
        keys=(keys.record(message_id), keys.revocations, keys.dead_letter_data,
              keys.unique_marker(unique_key or "-"), keys.events, *schedules),
        args=(message_id, now_ms, now_ms + revoke_ttl * 1000, record_ttl, record, expected,
              keyspace.revocation_channel, f"{queue} {message_id}", "1" if known else "0",
              " ".join(final_states), keys.done_channel(message_id), events_maxlen, task,
              "" if attempt is None else attempt, publish),
        parse=parse,
    )


def revoked(keys: QueueKeys, now_ms: int) -> Op:
    """Ids of the queue's revocations that have not expired."""
    return Op(command=("ZRANGEBYSCORE", keys.revocations, now_ms, "+inf"),
              parse=lambda reply: [_text(r) for r in reply])


# -- reading state -----------------------------------------------------------


def get(key: str) -> Op:
    return Op(command=("GET", key))


def mget(keys: Sequence[str]) -> Op:
    """The values of ``keys`` (one queue's: they share its hash tag), None where missing."""
    return Op(command=("MGET", *keys))


def zscore(key: str, member: str) -> Op:
    return Op(command=("ZSCORE", key, member), parse=lambda r: None if r is None else float(r))


def hget(key: str, field: str) -> Op:
    return Op(command=("HGET", key, field))


def locate(keys: QueueKeys, message_id: str) -> list[Op]:
    """What inspect() reads first, in one round trip: the record, then the message's
    due time (ms or None) and encoded message (or None) in each lane's schedule."""
    lanes = keys.lanes
    return [get(keys.record(message_id)),
            *(zscore(lane.schedule, message_id) for lane in lanes),
            *(hget(lane.schedule_data, message_id) for lane in lanes)]


def ready_heads(keys: QueueKeys, limit: int, mode: str = "s") -> list[Op]:
    """The first ``limit`` entries of each lane (reliable: its stream, ready and taken
    ones; fast: its list), each op's reply a list of encoded messages."""
    if mode == "l":
        return [Op(command=("LRANGE", lane.list, -limit, -1)) for lane in keys.lanes]
    return [Op(command=("XRANGE", lane.stream, "-", "+", "COUNT", limit),
               parse=lambda reply: [_field(fields, b"m") for _entry, fields in reply or []])
            for lane in keys.lanes]


def lane_lengths(keys: QueueKeys, mode: str = "s") -> list[Op]:
    return [Op(command=("LLEN" if mode == "l" else "XLEN",
                        lane.list if mode == "l" else lane.stream)) for lane in keys.lanes]


# -- the running index (core/running.py) --------------------------------------------


def running_entry(keys: QueueKeys, workers: Sequence[str], message_id: str) -> list[Op]:
    """The message's entry in each worker's running index of the queue (None where not)."""
    return [hget(keys.running(worker), message_id) for worker in workers]


def running_entries(keys: QueueKeys, worker: str) -> Op:
    """Every entry of one worker's running index of the queue: message id -> entry."""
    return Op(command=("HGETALL", keys.running(worker)), parse=_pairs)


def keep_running(keys: QueueKeys, worker: str, ttl_ms: int) -> Op:
    """Renew the TTL of one worker's running index of the queue (with its heartbeat)."""
    return Op(command=("PEXPIRE", keys.running(worker), ttl_ms))


def _pairs(reply: Any) -> dict[str, bytes]:
    if isinstance(reply, dict):
        return {_text(k): v for k, v in reply.items()}
    items = list(reply or [])
    return {_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


# -- workers and stats ----------------------------------------------------------


def heartbeat(keyspace: Keyspace, name: str, info: bytes, now_ms: int, ttl_ms: int) -> Op:
    return Op(script=scripts.HEARTBEAT, keys=(keyspace.workers, keyspace.worker(name)),
              args=("beat", name, now_ms, info, ttl_ms))


def leave(keyspace: Keyspace, name: str, now_ms: int) -> Op:
    return Op(script=scripts.HEARTBEAT, keys=(keyspace.workers, keyspace.worker(name)),
              args=("leave", name, now_ms))


def worker_names(keyspace: Keyspace, now_ms: int) -> Op:
    """The names of the workers whose registry entry has not expired."""
    return Op(command=("ZRANGEBYSCORE", keyspace.workers, now_ms, "+inf"),
              parse=lambda reply: [_text(name) for name in reply])


def worker_infos(keyspace: Keyspace, names: Sequence[str]) -> Op:
    """The encoded infos of ``names`` (those whose key expired are left out). Read after
    worker_names() rather than in one script with it: a script must name every key it
    reads beforehand, and the names are what the registry holds."""
    return Op(command=("MGET", *(keyspace.worker(name) for name in names)),
              parse=lambda reply: [info for info in reply if info])


def stats(keys: QueueKeys, now_ms: int, mode: str = "s") -> Op:
    """{ready, in_flight, scheduled, dead_letters, consumers, oldest_ready_age_ms}.

    Fast mode (``mode`` "l"): ready is the lists' LLEN, in_flight and consumers 0 (what
    workers popped is no longer in Redis); the age is read off the oldest message of
    each lane."""
    def parse(reply: Any) -> dict[str, int | None]:
        ready, in_flight, scheduled, dead, consumers, age = (int(x) for x in reply[:6])
        if len(reply) > 6:
            created = [c for c in map(_created_ms, reply[6]) if c is not None]
            age = max(0, now_ms - min(created)) if created else -1
        return {"ready": ready, "in_flight": in_flight, "scheduled": scheduled,
                "dead_letters": dead, "consumers": consumers,
                "oldest_ready_age_ms": age if age >= 0 else None}

    lanes = [key for lane in keys.lanes
             for key in (lane.list if mode == "l" else lane.stream, lane.schedule)]
    return Op(script=scripts.STATS, keys=(keys.dead_letters, *lanes),
              args=(GROUP, now_ms, mode), parse=parse)


def _created_ms(payload: bytes) -> int | None:
    """The creation time of an encoded message, None if it cannot be read."""
    try:
        return decode(payload).created_ms
    except Exception:  # noqa: BLE001 - a malformed message has no age; stats still answer
        return None


def purge(keys: QueueKeys, force: bool, dead_letters: bool, mode: str = "s") -> Op:
    """{ready, scheduled, dead_letters, in_flight}; ready is -1 when refused (in flight),
    -2 when the queue has no key at all."""
    def parse(reply: Any) -> dict[str, int]:
        ready, scheduled, dead, in_flight = (int(x) for x in reply)
        return {"ready": ready, "scheduled": scheduled, "dead_letters": dead,
                "in_flight": in_flight}

    lanes = [key for lane in keys.lanes
             for key in (lane.list if mode == "l" else lane.stream, lane.schedule,
                         lane.schedule_data)]
    return Op(script=scripts.PURGE, keys=(keys.dead_letters, keys.dead_letter_data, *lanes),
              args=(GROUP, int(force), int(dead_letters), mode), parse=parse)


# -- events ------------------------------------------------------------------------


def _events_of(queue: str, entries: Any, skipped: list[str] | None = None) -> list[Event]:
    out: list[Event] = []
    for cursor, fields in entries:
        cursor = _text(cursor)
        data = _field(fields, b"e") if fields else None
        event = events.parse(cursor, queue, data) if data else None
        if event is not None:
            out.append(event)
        elif skipped is not None:
            skipped.append(cursor)  # trimmed away (a pending entry) or not an event
    return out


def _parse_streams(queue: str, skipped: list[str] | None = None
                   ) -> Callable[[Any], list[Event]]:
    def parse(reply: Any) -> list[Event]:
        if not reply:
            return []
        # RESP2 gives a list of [stream, entries]; RESP3 a dict.
        items = reply.items() if isinstance(reply, dict) else reply
        return [e for _stream, entries in items for e in _events_of(queue, entries, skipped)]

    return parse


def events_range(keys: QueueKeys, queue: str, after: str, count: int) -> Op:
    """Up to ``count`` events after cursor ``after`` ("0": from the oldest kept)."""
    start = "-" if after in ("0", "0-0", "-") else f"({after}"
    return Op(command=("XRANGE", keys.events, start, "+", "COUNT", count),
              parse=lambda reply: _events_of(queue, reply or []))


def events_last(keys: QueueKeys) -> Op:
    """The cursor of the newest kept event, "0-0" when there is none."""
    return Op(command=("XREVRANGE", keys.events, "+", "-", "COUNT", 1),
              parse=lambda reply: _text(reply[0][0]) if reply else "0-0")


def events_read(keys: QueueKeys, queue: str, after: str, count: int, block_ms: int) -> Op:
    """XREAD: events after ``after`` ("$": only new ones), waiting up to ``block_ms``."""
    return Op(command=("XREAD", "COUNT", count, "BLOCK", block_ms, "STREAMS", keys.events,
                       after), parse=_parse_streams(queue))


def events_group_create(keys: QueueKeys, group: str) -> Op:
    # From id 0: a new group (a history writer) reads every event still kept.
    return Op(command=("XGROUP", "CREATE", keys.events, group, "0", "MKSTREAM"))


def events_read_group(keys: QueueKeys, queue: str, group: str, consumer: str, count: int,
                      block_ms: int | None, pending: bool = False,
                      skipped: list[str] | None = None) -> Op:
    """XREADGROUP on the events stream: new events (">"), or with ``pending`` those
    delivered to ``consumer`` and not acknowledged ("0"; never blocks). Entries that are
    no longer events (trimmed while pending) go to ``skipped``."""
    command: list[Arg] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
    if block_ms is not None and not pending:
        command += ["BLOCK", block_ms]
    command += ["STREAMS", keys.events, "0" if pending else ">"]
    return Op(command=tuple(command), parse=_parse_streams(queue, skipped))


def events_ack(keys: QueueKeys, group: str, cursors: Sequence[str]) -> Op:
    return Op(command=("XACK", keys.events, group, *cursors), parse=int)


#: Most entries events_read.lua looks at to trim in one call when Redis has no counters.
TRIM_SCAN = 10_000


class GroupRead(NamedTuple):
    """What one events_read did: events counted lost (trimmed before the group read
    them), entries trimmed, events the group had not read before this read (-1: Redis
    cannot tell), its last delivered cursor, the events read, the cursors of entries read
    that are not events (to acknowledge), and gaps: 1 when events were trimmed before the
    group read them and Redis cannot count them (before Redis 7)."""

    lost: int
    trimmed: int
    unread: int
    last: str
    events: list[Event]
    skipped: list[str]
    gaps: int = 0


def events_read_counted(keys: QueueKeys, queue: str, group: str, consumer: str, count: int,
                        keep: int, now_ms: int) -> Op:
    """A group's next ``count`` events (0: none), in one step with counting the events
    trimmed before it read them (in ``keys.history_health``) and trimming the stream to
    its newest ``keep`` (0: no trim) and what it has not read (scripts/events_read.lua)."""
    def parse(reply: Any) -> GroupRead:
        lost, trimmed, unread, last, entries, gaps = reply
        skipped: list[str] = []
        found = _events_of(queue, entries or [], skipped)
        return GroupRead(int(lost), int(trimmed), int(unread), _text(last), found, skipped,
                         int(gaps))

    return Op(script=scripts.EVENTS_READ, keys=(keys.events, keys.history_health),
              args=(group, consumer, count, keep, now_ms, TRIM_SCAN), parse=parse)


def events_wait(keys: QueueKeys, after: str, block_ms: int) -> Op:
    """Wait up to ``block_ms`` for an event after cursor ``after`` (XREAD BLOCK, COUNT 1):
    whether one came. Reads nothing for a group."""
    return Op(command=("XREAD", "COUNT", 1, "BLOCK", block_ms, "STREAMS", keys.events, after),
              parse=bool)


def history_health(keys: QueueKeys) -> Op:
    """The history health hash: {field: text} (lost, lost_last_ms, unwritable, ...)."""
    def parse(reply: Any) -> dict[str, str]:
        if isinstance(reply, list):
            reply = dict(zip(reply[::2], reply[1::2], strict=True))
        return {_text(k): _text(v) for k, v in (reply or {}).items()}

    return Op(command=("HGETALL", keys.history_health), parse=parse)


def events_groups(keys: QueueKeys) -> Op:
    """XINFO GROUPS of the events stream: [{name, pending, lag, ...}]; [] without one."""
    def parse(reply: Any) -> list[dict[str, Any]]:
        out = []
        for fields in reply or []:
            if isinstance(fields, list):
                fields = dict(zip(fields[::2], fields[1::2], strict=True))
            out.append({_text(k): _text(v) for k, v in fields.items()})
        return out

    return Op(command=("XINFO", "GROUPS", keys.events), parse=parse)
