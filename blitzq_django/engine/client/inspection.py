"""What is known of a message right now: ``Client.inspect()``, ``Client.running()`` and,
when nothing is known, why (``Client.explain_missing()``). Sync and async twins make the
same reads; the decisions between them are the pure functions here. Each takes the
broker (and what else it uses) from the ``Client``, which composes them.

inspect() reads, stopping at the first that answers:

1. in one round trip, the record and the schedule of each lane: a final record is the
   answer; a scheduled message (delayed, ETA, retry backoff, rate-limit deferral) is
   answered ``scheduled`` (or the record's ``retrying``) with its due time (``due_ms``);
   a ``running`` record (TRACK_STATE) is the answer;
2. the live workers serving the queue (the registry, one call), then their running
   indexes (one round trip, core/running.py): a listed attempt is answered ``running``
   with its worker and start, whatever TRACK_STATE says (listed by two workers, one of
   them dead and the other running it again: the later start);
3. the dead letter: answered ``dead_lettered``;
4. the record, if any (``queued``, ``retrying``); else None.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..core import record as states
from ..core.deadletter import DeadLetter
from ..core.ids import now_ms as clock_ms
from ..core.message import decode
from ..core.record import FINAL_STATES, Record
from ..core.registry import WorkerInfo
from ..core.running import INDEX_DELAY_S, Running, parse
from ..errors import MessageDecodeError

if TYPE_CHECKING:
    from ..brokers.base import Broker
    from ..core.task import TaskRegistry

#: explain_missing() looks at most this many messages of each lane of a queue.
QUEUE_LOOK_LIMIT = 1000

#: Why inspect() found nothing (``Absence.reason``).
WAITING = "waiting"  # in the queue: found among its first messages
MAYBE_WAITING = "maybe_waiting"  # the queue is too long to look through
NOT_STORED = "not_stored"  # finished, and its outcome is not stored (STORE_RESULTS)
EXPIRED = "expired"  # finished, and its record's TTL (RESULT_TTL) has passed
LOST = "lost"  # finished, its record should still be kept, and is not
GONE = "gone"  # said unfinished, and nowhere in Redis
UNKNOWN = "unknown"  # nothing known, and no hint of it


@dataclass(frozen=True, slots=True)
class Absence:
    """Why inspect() found nothing, as far as Redis can tell."""

    reason: str  # WAITING | MAYBE_WAITING | NOT_STORED | EXPIRED | LOST | GONE | UNKNOWN
    text: str  # the same, in a sentence for people
    #: EXPIRED / LOST: when its record expired or would have (ms)
    until_ms: int | None = None


# -- inspect ---------------------------------------------------------------------------


def workers(broker: Broker) -> list[WorkerInfo]:
    """The live workers of the broker's namespace, by name: one call."""
    return _infos(broker.workers(clock_ms()))


async def aworkers(broker: Broker) -> list[WorkerInfo]:
    return _infos(await broker.aworkers(clock_ms()))


def _infos(blobs: Iterable[bytes]) -> list[WorkerInfo]:
    return sorted((WorkerInfo.from_bytes(b) for b in blobs), key=lambda w: w.name)


def inspect(broker: Broker, message_id: str, queue: str) -> Record | None:
    record, due, body = broker.locate(queue, message_id)
    known = _from_record_or_schedule(message_id, queue, record, due, body)
    if known is not None:
        return known
    hits = broker.find_running(queue, message_id, serving(workers(broker), queue))
    if hits:
        return _running_record(queue, message_id, hits, record)
    return _dead_or(message_id, queue, broker.dead_letter(queue, message_id), record)


async def ainspect(broker: Broker, message_id: str, queue: str) -> Record | None:
    record, due, body = await broker.alocate(queue, message_id)
    known = _from_record_or_schedule(message_id, queue, record, due, body)
    if known is not None:
        return known
    hits = await broker.afind_running(queue, message_id,
                                      serving(await aworkers(broker), queue))
    if hits:
        return _running_record(queue, message_id, hits, record)
    return _dead_or(message_id, queue, await broker.adead_letter(queue, message_id), record)


def _from_record_or_schedule(message_id: str, queue: str, record: Record | None,
                             due: int | None, body: bytes | None) -> Record | None:
    """The answer of step 1, or None to read on."""
    if record is not None and record.is_final:
        return record
    if due is not None:
        if record is not None and record.state in (states.SCHEDULED, states.RETRYING):
            return replace(record, due_ms=due)  # TRACK_STATE's, with the retry's error
        try:
            message = decode(body or b"")
        except MessageDecodeError:
            return Record(id=message_id, task="", queue=queue, state=states.SCHEDULED,
                          due_ms=due)
        return Record(id=message_id, task=message.task, queue=queue, state=states.SCHEDULED,
                      attempt=message.attempt, created_ms=message.created_ms, due_ms=due)
    if record is not None and record.state == states.RUNNING:
        return record
    return None


def serving(workers: Iterable[WorkerInfo], queue: str) -> list[str]:
    """The names of the live workers that serve ``queue``."""
    return [w.name for w in workers if queue in w.queues]


def _running_record(queue: str, message_id: str, hits: list[tuple[str, bytes]],
                    record: Record | None) -> Record | None:
    running = _latest(parse(queue, worker, message_id, data) for worker, data in hits)
    if running is None:
        return record
    found = running.to_record()
    if found.created_ms is None and record is not None:
        found = replace(found, created_ms=record.created_ms)
    return found


def _dead_or(message_id: str, queue: str, dead: bytes | None,
             record: Record | None) -> Record | None:
    if dead is None:
        return record
    letter = DeadLetter.from_bytes(dead)
    return Record(id=message_id, task=letter.task or "", queue=queue,
                  state=states.DEAD_LETTERED, attempt=letter.attempt,
                  error_type=letter.error_type, error_message=letter.error_message,
                  traceback=letter.traceback, reason=letter.reason,
                  finished_ms=letter.dead_ms)


# -- running -------------------------------------------------------------------------------


def running(broker: Broker, queues: Iterable[str] | None = None,
            live: Iterable[WorkerInfo] | None = None) -> list[Running]:
    pairs = _indexes(workers(broker) if live is None else live, queues)
    return _listed(pairs, broker.running_entries(pairs) if pairs else [])


async def arunning(broker: Broker, queues: Iterable[str] | None = None,
                   live: Iterable[WorkerInfo] | None = None) -> list[Running]:
    pairs = _indexes(await aworkers(broker) if live is None else live, queues)
    return _listed(pairs, await broker.arunning_entries(pairs) if pairs else [])


def _indexes(workers: Iterable[WorkerInfo], queues: Iterable[str] | None
             ) -> list[tuple[str, str]]:
    """(queue, worker) of each running index to read: the live workers' queues (those
    of ``queues`` only, when given)."""
    wanted = None if queues is None else set(queues)
    return [(queue, w.name) for w in workers for queue in w.queues
            if wanted is None or queue in wanted]


def _latest(found: Iterable[Running | None]) -> Running | None:
    """The latest attempt of a message listed by more than one live worker: a worker that
    died while running it still lists it until its registry entry expires, and the one
    that recovered it lists a later start."""
    return max((r for r in found if r is not None), key=lambda r: r.started_ms, default=None)


def _listed(pairs: Sequence[tuple[str, str]], indexes: Sequence[dict[str, bytes]]
            ) -> list[Running]:
    by_id: dict[tuple[str, str], list[Running | None]] = {}
    for (queue, worker), index in zip(pairs, indexes, strict=True):
        for message_id, data in index.items():
            by_id.setdefault((queue, message_id), []).append(
                parse(queue, worker, message_id, data))
    out = [latest for found in by_id.values() if (latest := _latest(found)) is not None]
    return sorted(out, key=lambda r: (r.started_ms, r.id))


# -- why nothing is known ------------------------------------------------------------------


def explain_missing(message_id: str, queue: str, *, broker: Broker, registry: TaskRegistry,
                    store_results: bool, track_state: bool, task: str | None = None,
                    state: str | None = None, finished_ms: int | None = None,
                    now_ms: int | None = None) -> Absence:
    now = now_ms if now_ms is not None else clock_ms()
    if state in FINAL_STATES:
        stored = outcome_stored(registry, store_results, track_state, task, state)
        return _finished_absence(broker, stored, task, state, finished_ms, now)
    found, held = broker.find_ready(queue, message_id, QUEUE_LOOK_LIMIT)
    return _unfinished_absence(track_state, queue, state, found, held)


async def aexplain_missing(message_id: str, queue: str, *, broker: Broker,
                           registry: TaskRegistry, store_results: bool, track_state: bool,
                           task: str | None = None, state: str | None = None,
                           finished_ms: int | None = None,
                           now_ms: int | None = None) -> Absence:
    now = now_ms if now_ms is not None else clock_ms()
    if state in FINAL_STATES:
        stored = outcome_stored(registry, store_results, track_state, task, state)
        return _finished_absence(broker, stored, task, state, finished_ms, now)
    found, held = await broker.afind_ready(queue, message_id, QUEUE_LOOK_LIMIT)
    return _unfinished_absence(track_state, queue, state, found, held)


def outcome_stored(registry: TaskRegistry, store_results: bool, track_state: bool,
                   task: str | None, state: str | None) -> bool:
    """Whether workers configured so keep a record of a message of ``task`` that ended
    in ``state``: a success only with its results stored; any other final state also
    with TRACK_STATE (engine/worker/outcome.py)."""
    spec = registry.find(task) if task else None
    store = store_results if spec is None or spec.store_result is None else spec.store_result
    return store or (state != states.SUCCEEDED and track_state)


def _finished_absence(broker: Broker, stored: bool, task: str | None, state: str | None,
                      finished_ms: int | None, now: int) -> Absence:
    name = f"task {task!r}" if task else "this task"
    if not stored:
        return Absence(NOT_STORED, f"It finished ({state}), and no record of that is kept: "
                       f"results of {name} are not stored (STORE_RESULTS off, or the task's "
                       f"store_result=False).")
    ttl = broker.record_ttl
    kept = "" if ttl is None else f" (records are kept {ttl} s after the task ends)"
    if finished_ms is None or ttl is None:
        return Absence(EXPIRED, f"It finished ({state}), and its record is no longer in "
                       f"Redis: it expired{kept}, or was removed.")
    until = finished_ms + ttl * 1000
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(until / 1000))
    if until <= now:
        return Absence(EXPIRED, f"It finished ({state}), and its record expired at {when}"
                       f"{kept}.", until)
    return Absence(LOST, f"It finished ({state}), and its record should be kept until "
                   f"{when}{kept}, but Redis does not have it: removed by Redis (maxmemory "
                   "eviction), a flush, or a restart without persistence.", until)


def _unfinished_absence(track_state: bool, queue: str, state: str | None,
                        found: bool | None, held: int) -> Absence:
    unrecorded = ("" if track_state else
                  " (without TRACK_STATE no record is kept of a message until it ends)")
    if found:
        return Absence(WAITING, f"It is in queue {queue!r}: waiting, or taken by a worker "
                       f"and about to start{unrecorded}.")
    if found is None:
        return Absence(MAYBE_WAITING, f"Queue {queue!r} holds {held} messages, more than "
                       f"are looked through here: it may be waiting among them{unrecorded}.")
    if state is not None:
        return Absence(GONE, f"It is not in queue {queue!r}, not scheduled, not listed as "
                       f"running by a live worker (an attempt is listed once it has run "
                       f"{INDEX_DELAY_S:g} s), and no record of it is kept: it has just "
                       f"started, or it ended and its outcome was not stored (what says it "
                       f"is {state} has not seen the end yet), or it was purged or lost.")
    return Absence(UNKNOWN, f"Nothing of this id is in Redis for queue {queue!r}: it is not "
                   "waiting, scheduled, running, dead-lettered or recorded (an unknown id, "
                   "or a record that expired or was never stored).")
