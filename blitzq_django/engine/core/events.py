"""Events: every transition of a message, appended to its queue's events stream.

Each event is one stream entry of ``bq:{ns:queue}:ev`` (``QueueKeys.events``),
written by the same atomic step (Lua script) that makes the transition, so no
event is missed or invented when a worker dies. The stream is capped with
``XADD ... MAXLEN ~ <events_maxlen>`` (a broker's ``events_maxlen``; 0 turns
events off). The entry has one field ``e``, a msgpack array::

    [kind, id, task, time_ms, attempt, worker, duration_ms, error_type]

An absent value is nil, or ``false`` when Redis's Lua ``cmsgpack`` packed it;
readers map ``false`` to None (``parse``). ``worker`` is the consumer name of the
worker that made the transition, ``duration_ms`` the attempt's run time (outcomes
of an attempt that ran), ``error_type`` the exception's type name (failures).
A broker built with ``event_details=True`` (the Django glue, when task history is on)
appends a ninth element, ``detail`` (``Event.detail``): the encoded message on the
enqueue side, the error message, traceback and message on failures (``message_detail``,
``failure_detail``); readers of eight elements are unaffected.

The canonical Lua to append one (copy it into a script that makes a transition;
``maxlen`` comes from the broker, 0 when events are off)::

    -- event(stream, maxlen, kind, id, task, time_ms, attempt, worker, duration_ms,
    --       error_type): absent values may be nil; numbers may be strings (ARGV)
    local function event(stream, maxlen, kind, id, task, time_ms, attempt, worker,
                         duration_ms, error_type)
      if maxlen > 0 then
        redis.call("XADD", stream, "MAXLEN", "~", maxlen, "*", "e", cmsgpack.pack({
          kind, id, task or false, tonumber(time_ms), tonumber(attempt) or false,
          worker or false, tonumber(duration_ms) or false, error_type or false}))
      end
    end

The state machine (``valid_path`` checks a message's events against it)::

    (new)     enqueued | scheduled | replayed          -> waiting
    waiting   started                                  -> running
              scheduled (rate-limit deferral) | requeued -> waiting
              recovered                                -> recovered
              dead_lettered | failed | expired | cancelled -> (terminal)
    running   retried | requeued                       -> waiting
              recovered                                -> recovered
              succeeded | failed | dead_lettered | cancelled -> (terminal)
    recovered any move of waiting or of running
    dead_lettered  replayed                            -> waiting

``waiting`` is ready or scheduled: promotion (scheduled -> ready when due) writes
no event, so both are one state. A message delivered but not started (prefetched)
is waiting too: a worker that dies then leaves it to be ``recovered`` without a
``started``. ``recovered`` (another consumer claimed it after its lease ran out)
allows the moves of both states: the new owner may already hold it and have it
running (it claimed back an entry its own stalled attempt still runs). A worker
claiming back its own entry writes no event. ``replayed`` starts a new life after
``dead_lettered`` (or starts one, for a replay under a new id). Terminal events:
``TERMINAL``; a message whose events end in one is finished.

A ``started`` event is written only while the worker owns the delivery (the
settle script checks ownership first): with ``track_state`` by the running
record's own step; otherwise by the step that settles the attempt (one write for
both), unless the attempt runs past ``START_EVENT_DELAY_S`` (``worker/flusher.py``)
and it is written on its own first.

Most events are packed by the brokers (``pack``/``packer``) and appended by the
scripts as they are; ``recover.lua`` and ``cancel.lua`` pack theirs with the
snippet above. docs/events.md has the whole story and what it costs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from ..errors import MAX_SECONDS
from . import record
from .states import EventKind
from .validate import MAX_ATTEMPT

# The kinds of core/states.py's EventKind, bound once as plain str (events are packed
# per message; see core/record.py).
ENQUEUED = EventKind.ENQUEUED.value
SCHEDULED = EventKind.SCHEDULED.value
STARTED = EventKind.STARTED.value
SUCCEEDED = EventKind.SUCCEEDED.value
FAILED = EventKind.FAILED.value
RETRIED = EventKind.RETRIED.value
DEAD_LETTERED = EventKind.DEAD_LETTERED.value
CANCELLED = EventKind.CANCELLED.value
EXPIRED = EventKind.EXPIRED.value
RECOVERED = EventKind.RECOVERED.value
REQUEUED = EventKind.REQUEUED.value
REPLAYED = EventKind.REPLAYED.value
WORKFLOW_STARTED = EventKind.WORKFLOW_STARTED.value
WORKFLOW_SUCCEEDED = EventKind.WORKFLOW_SUCCEEDED.value
WORKFLOW_FAILED = EventKind.WORKFLOW_FAILED.value
WORKFLOW_CANCELLED = EventKind.WORKFLOW_CANCELLED.value

KINDS = frozenset(kind.value for kind in EventKind)
#: The events of a workflow rather than of a message: their ``id`` is a workflow id
#: (core/workflow.py). Written at least once (a step that ran again writes its event
#: again): a reader keys them by workflow id.
WORKFLOW_KINDS = frozenset({WORKFLOW_STARTED, WORKFLOW_SUCCEEDED, WORKFLOW_FAILED,
                            WORKFLOW_CANCELLED})
#: A workflow's end event, by its final state.
WORKFLOW_END = {"succeeded": WORKFLOW_SUCCEEDED, "failed": WORKFLOW_FAILED,
                "cancelled": WORKFLOW_CANCELLED}
TERMINAL = frozenset({SUCCEEDED, FAILED, DEAD_LETTERED, CANCELLED, EXPIRED})

#: The event of a settlement, by the record state it means (Settlement.state); a state
#: not listed is its own event kind.
OF_STATE = {
    record.QUEUED: REQUEUED,  # a requeue (shutdown) puts it back as queued
    record.RUNNING: STARTED,
    record.RETRYING: RETRIED,
    record.SCHEDULED: SCHEDULED,  # a rate-limit deferral: back on the schedule, same attempt
    record.SUCCEEDED: SUCCEEDED,
    record.FAILED: FAILED,
    record.DEAD_LETTERED: DEAD_LETTERED,
    record.CANCELLED: CANCELLED,
    record.EXPIRED: EXPIRED,
}


@dataclass(frozen=True, slots=True)
class Event:
    """One transition of one message. ``cursor`` is its stream entry id: pass it as
    ``after=`` to read the events that follow."""

    cursor: str
    queue: str
    kind: str
    id: str
    task: str
    time_ms: int
    attempt: int | None = None
    worker: str | None = None
    duration_ms: int | None = None
    error_type: str | None = None
    #: What a broker told to write details (``event_details``) adds: the encoded message
    #: (bytes; its size, an int, when over DETAIL_MAX_MESSAGE) on enqueued, scheduled (at
    #: enqueue) and replayed; [error message, traceback, encoded message or its size] on
    #: failed, retried and dead_lettered. None otherwise.
    detail: Any = None

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL


def _opt(value: Any) -> Any:
    return None if value is False else value


_local = threading.local()  # a Packer per thread (a Packer is not thread-safe)


def pack(kind: str, id: str, task: str | None, time_ms: int, attempt: int | None = None,
         worker: str | None = None, duration_ms: int | None = None,
         error_type: str | None = None) -> bytes:
    """The ``e`` field of one event. The brokers pack most events here and the scripts
    append them as they are: packing in Lua (cmsgpack) cost Redis five times the time
    msgpack's Packer costs the worker, on the path every message takes."""
    return packer().pack([kind, id, task, time_ms, attempt, worker, duration_ms, error_type])


#: Most bytes of an encoded message an event's detail carries (a larger one: its size).
#: The events stream is capped by count (EVENTS_MAXLEN), so this bounds its memory: at
#: most about EVENTS_MAXLEN / 3 messages of this size per queue.
DETAIL_MAX_MESSAGE = 8 * 1024
#: Most characters of an error message and of a traceback in a failure's detail.
DETAIL_MAX_ERROR = 4_000
DETAIL_MAX_TRACEBACK = 16_000


def message_detail(payload: bytes | None) -> bytes | int | None:
    """The detail of an enqueue-side event: the encoded message, or its size if too big."""
    if not payload:
        return None
    return payload if len(payload) <= DETAIL_MAX_MESSAGE else len(payload)


def _cut(text: Any, most: int, tail: bool = False) -> str | None:
    if not isinstance(text, str):
        return None
    if len(text) <= most:
        return text
    return "..." + text[-(most - 3):] if tail else text[:most - 3] + "..."


def failure_detail(settlement: Any) -> list[Any] | None:
    """The detail of a failure event (failed, retried, dead_lettered): [error message,
    traceback (its end kept), encoded message or its size] from a Settlement's failure
    record or dead letter; None when it has neither."""
    source = settlement.failure if settlement.failure is not None else settlement.letter
    if source is None:
        return None
    return [_cut(source.error_message, DETAIL_MAX_ERROR),
            _cut(source.traceback, DETAIL_MAX_TRACEBACK, tail=True),
            message_detail(settlement.delivery.payload)]


def packer() -> msgpack.Packer:
    """This thread's Packer: ``packer().pack([kind, id, task, time_ms, attempt, worker,
    duration_ms, error_type])`` is ``pack()`` without a call per event (the settle path)."""
    try:
        return _local.packer
    except AttributeError:
        found = _local.packer = msgpack.Packer(use_bin_type=True)
        return found


#: Most bytes of one stream entry a reader decodes. The largest event written (a failure:
#: its error message, traceback and message, each cut to its DETAIL_MAX_*) is under
#: 100 KB; a larger entry is not an event, and is skipped undecoded.
EVENT_MAX_BYTES = 128 * 1024
#: Most elements of one array or map in an event (its nine fields; a detail of three).
#: With EVENT_MAX_BYTES this bounds what decoding any entry costs: a forged 8 MiB entry
#: of empty arrays would otherwise cost each reader over half a GiB (as core/message.py
#: bounds a message).
EVENT_MAX_ITEMS = 32
#: The longest run time an event may carry (ms); a longer one reads as unknown (None).
MAX_DURATION_MS = MAX_SECONDS * 1000


def parse(cursor: str, queue: str, data: bytes) -> Event | None:
    """The event in one stream entry's ``e`` field; None if it is not one.

    Bounded: an entry over EVENT_MAX_BYTES, or with an array or map over EVENT_MAX_ITEMS,
    is not decoded. An attempt or a duration out of its range reads as None."""
    if len(data) > EVENT_MAX_BYTES:
        return None
    try:
        fields = msgpack.unpackb(data, raw=False, unicode_errors="replace",
                                 max_array_len=EVENT_MAX_ITEMS, max_map_len=EVENT_MAX_ITEMS)
    except Exception:  # noqa: BLE001 - a stream anyone may write to
        return None
    if not isinstance(fields, list) or len(fields) < 4:
        return None
    detail = _opt(fields[8]) if len(fields) > 8 else None
    fields = [_opt(v) for v in fields[:8]] + [None] * (8 - min(len(fields), 8))
    kind, id_, task, time_ms, attempt, worker, duration, error_type = fields
    if not isinstance(kind, str) or not isinstance(id_, str) or type(time_ms) is not int:
        return None
    return Event(cursor, queue, kind, id_, task if isinstance(task, str) else "", time_ms,
                 attempt if type(attempt) is int and 0 < attempt <= MAX_ATTEMPT else None,
                 worker if isinstance(worker, str) else None,
                 duration if type(duration) is int and 0 <= duration <= MAX_DURATION_MS
                 else None,
                 error_type if isinstance(error_type, str) else None, detail)


# -- the state machine -------------------------------------------------------------------

_WAITING, _RUNNING, _RECOVERED, _DONE, _DEAD = "waiting", "running", "recovered", "done", "dead"

_FROM_WAITING = {STARTED: _RUNNING, SCHEDULED: _WAITING, REQUEUED: _WAITING,
                 RECOVERED: _RECOVERED, DEAD_LETTERED: _DEAD, FAILED: _DONE, EXPIRED: _DONE,
                 CANCELLED: _DONE}
_FROM_RUNNING = {RETRIED: _WAITING, REQUEUED: _WAITING, RECOVERED: _RECOVERED,
                 SUCCEEDED: _DONE, FAILED: _DONE, DEAD_LETTERED: _DEAD, CANCELLED: _DONE}

MACHINE: dict[str | None, dict[str, str]] = {
    None: {ENQUEUED: _WAITING, SCHEDULED: _WAITING, REPLAYED: _WAITING},
    _WAITING: _FROM_WAITING,
    _RUNNING: _FROM_RUNNING,
    _RECOVERED: {**_FROM_WAITING, **_FROM_RUNNING},
    _DEAD: {REPLAYED: _WAITING},
    _DONE: {},
}


def valid_path(kinds: Iterable[str]) -> bool:
    """Whether these event kinds of one message, oldest first, are a path of the state
    machine in this module's docstring, from its first event. (A complete history: the
    stream's cap may have trimmed the start of an old message's.)"""
    state: str | None = None
    for kind in kinds:
        moves = MACHINE[state]
        if kind not in moves:
            return False
        state = moves[kind]
    return state is not None


def peek(payload: bytes | None) -> tuple[str, str] | None:
    """The (id, task) at the head of an encoded message, without decoding the rest."""
    if not payload:
        return None
    try:
        unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(payload), 1024))
        unpacker.feed(payload[:4096])
        if unpacker.read_array_header() < 3:
            return None
        unpacker.skip()  # the version
        id_, task = unpacker.unpack(), unpacker.unpack()
    except Exception:  # noqa: BLE001 - any bytes at all may arrive here
        return None
    if isinstance(id_, str) and isinstance(task, str) and id_:
        return id_, task
    return None
