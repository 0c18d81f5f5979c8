"""Task progress: ``current_task().progress(done, total, note=None)`` and its followers.

A running attempt reports how far it is; the worker writes the latest report of each
message to Redis (``QueueKeys.progress``: a hash with the TTL of records) and publishes
it on the message's progress channel (``QueueKeys.progress_channel``), so a follower is
pushed each change rather than polling. Writes are rate-limited per message: at most one
every ``MIN_INTERVAL_S`` (0.1 s, so at most 10 per second); reports in between replace
each other and the last one is always written. ``progress()`` never blocks the caller:
it hands the report to the worker's event loop, from a ``def`` task's thread as from an
``async def`` task.

Readers: ``client.progress(id)``, ``await client.aprogress(id)``, ``handle.progress()``;
``follow()`` yields a message's state, progress and final outcome as they change (what
the Django consumer sends to a browser).

The hash: ``d`` done, ``t`` total ("" when unknown), ``n`` note, ``ms`` time of the
report, ``u`` the owner (the message's ``user_id`` header; written at enqueue by
``claim()`` too, so a follower may be checked before the task reports anything).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .core.ids import now_ms
from .errors import ConfigurationError

if TYPE_CHECKING:
    from .brokers.base import Broker
    from .core.record import Record

#: Seconds between two progress writes of one message, at least (10 per second at most).
MIN_INTERVAL_S = 0.1
#: The header that names the user who enqueued a message (its owner).
USER_HEADER = "user_id"
#: Most characters of a note.
MAX_NOTE = 500
#: Seconds between two re-reads of a followed message when no publish arrives.
RECHECK_S = 1.0


@dataclass(frozen=True, slots=True)
class Progress:
    """The latest progress report of one message."""

    done: float
    total: float | None = None
    note: str | None = None
    time_ms: int = 0
    owner: str | None = None

    @property
    def fraction(self) -> float | None:
        """done / total, from 0 to 1; None without a total."""
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))

    def to_dict(self) -> dict[str, Any]:
        return {"done": self.done, "total": self.total, "note": self.note,
                "fraction": self.fraction, "time_ms": self.time_ms}

    def fields(self) -> dict[str, str]:
        out = {"d": _number(self.done), "t": "" if self.total is None else _number(self.total),
               "n": self.note or "", "ms": str(self.time_ms)}
        if self.owner is not None:
            out["u"] = self.owner
        return out

    @classmethod
    def from_fields(cls, raw: dict[Any, Any]) -> Progress | None:
        """From the hash; None when it holds no report (only an owner, or nothing)."""
        fields = {_text(k): _text(v) for k, v in raw.items()}
        if "d" not in fields:
            return None
        try:
            return cls(float(fields["d"]), float(fields["t"]) if fields.get("t") else None,
                       fields.get("n") or None, int(fields.get("ms") or 0), fields.get("u"))
        except ValueError:
            return None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def make(done: Any, total: Any = None, note: Any = None, owner: Any = None) -> Progress:
    """A checked report: finite non-negative numbers, a string note (cut to MAX_NOTE)."""
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or value < 0):
            raise ConfigurationError(f"progress: {name} must be a finite number >= 0, "
                                     f"not {value!r:.60}")
    if note is not None and not isinstance(note, str):
        raise ConfigurationError(f"progress: note must be a string, not {note!r:.60}")
    if note is not None and len(note) > MAX_NOTE:
        note = note[:MAX_NOTE - 3] + "..."
    return Progress(float(done), None if total is None else float(total), note,
                    now_ms(), None if owner is None else str(owner))


# -- storage ---------------------------------------------------------------------------
# The broker's progress store (brokers/capabilities.py ProgressStore): on Redis the hash
# and channel of QueueKeys, in memory a dict.


async def awrite(broker: Any, queue: str, message_id: str, progress: Progress) -> None:
    """Write one report and publish it."""
    await broker.progress.awrite(queue, message_id, progress.fields(),
                                 json.dumps(progress.to_dict()).encode())


def claim(broker: Broker, queue: str, message_id: str, owner: Any) -> None:
    """Record the owner of a message (its user_id) before it reports anything."""
    broker.progress.write(queue, message_id, {"u": str(owner)})


async def aclaim(broker: Broker, queue: str, message_id: str, owner: Any) -> None:
    await broker.progress.awrite(queue, message_id, {"u": str(owner)})


def read_raw(broker: Broker, queue: str, message_id: str) -> dict[str, str]:
    return broker.progress.read(queue, message_id)


async def aread_raw(broker: Broker, queue: str, message_id: str) -> dict[str, str]:
    return await broker.progress.aread(queue, message_id)


def owner_of(raw: dict[str, str]) -> str | None:
    return raw.get("u") or None


# -- the writer in a worker ----------------------------------------------------------------


class ProgressReporter:
    """Rate-limited progress writes of one worker, made on its event loop.

    ``report()`` may be called from any thread: it keeps the latest report of each
    message and schedules a write, at once if the message's last write is older than
    ``interval_s``, else when it will be. Reports that arrive meanwhile replace the
    pending one, so the last report is always written and at most one write per
    ``interval_s`` is made per message.

    When an attempt ends, ``before_outcome()`` writes its pending report at once: the
    worker hands the outcome over once that write is done, so a follower that sees the
    final state reads the last report with it (not one 0.1 s older).
    """

    def __init__(self, broker: Any, loop: asyncio.AbstractEventLoop,
                 interval_s: float = MIN_INTERVAL_S) -> None:
        self._broker = broker
        self._loop = loop
        self._interval = interval_s
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], Progress] = {}
        self._last: dict[tuple[str, str], float] = {}  # loop only
        self._writing: dict[tuple[str, str], asyncio.Task[None]] = {}  # the latest of each
        #: writes made (for tests and curiosity)
        self.writes = 0

    def report(self, queue: str, message_id: str, progress: Progress) -> None:
        key = (queue, message_id)
        with self._lock:
            first = key not in self._pending
            self._pending[key] = progress
        if not first:
            return  # a write is already scheduled: it takes this report
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            if running is self._loop:
                self._schedule(key)
            else:
                self._loop.call_soon_threadsafe(self._schedule, key)
        except RuntimeError:  # the worker's loop is closed: nothing writes any more
            with self._lock:
                self._pending.pop(key, None)

    def _schedule(self, key: tuple[str, str]) -> None:
        last = self._last.get(key)
        delay = 0.0 if last is None else max(0.0, last + self._interval - time.monotonic())
        if delay:
            self._loop.call_later(delay, self._flush, key)
        else:
            self._flush(key)

    def _flush(self, key: tuple[str, str]) -> None:
        with self._lock:
            progress = self._pending.pop(key, None)
        if progress is None:
            return
        now = time.monotonic()
        self._last[key] = now
        if len(self._last) > 1000:  # forget messages not written for a while
            self._last = {k: t for k, t in self._last.items() if now - t < self._interval * 2}
        task = self._loop.create_task(self._write(key, progress, self._writing.get(key)))
        self._writing[key] = task
        task.add_done_callback(lambda done: self._written(key, done))

    def _written(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        if self._writing.get(key) is task:
            del self._writing[key]

    def before_outcome(self, queue: str, message_id: str) -> asyncio.Task[None] | None:
        """The write of this message's last report, started now if it was still pending
        (its attempt has ended: no rate limit to keep), or None when nothing is being
        written. It ends after every earlier write of the message (``_write``), so an
        outcome handed over once it is done lands after them all, unless a write timed
        out (a stalled Redis may still apply it later). (Loop only.)"""
        if not self._pending and not self._writing:
            return None  # the common case: no task reports progress
        key = (queue, message_id)
        with self._lock:
            pending = key in self._pending
        if pending:
            self._flush(key)
        return self._writing.get(key)

    async def _write(self, key: tuple[str, str], progress: Progress,
                     previous: asyncio.Task[None] | None) -> None:
        if previous is not None and not previous.done():
            # One message's writes go one after another: on two pooled connections an
            # older report could land last (before_outcome() starts one ahead of the
            # rate limit), and waiting on the latest write then covers them all.
            await asyncio.wait([previous])
        try:
            await awrite(self._broker, key[0], key[1], progress)
            self.writes += 1
        except Exception:  # noqa: BLE001 - progress is best effort; the task goes on
            logging.getLogger("blitzq").warning("progress of %s not written", key[1],
                                                exc_info=True)

    async def drain(self, timeout: float = 5.0) -> None:
        """Write the pending reports now and wait for the writes (a stopping worker)."""
        with self._lock:
            keys = list(self._pending)
        for key in keys:
            self._flush(key)
        if self._writing:
            await asyncio.wait(list(self._writing.values()), timeout=timeout)


# -- following -----------------------------------------------------------------------------


def snapshot(record: Record | None, raw: dict[str, str]) -> dict[str, Any]:
    """What a follower is told of a message: its state, its progress, and when it is
    finished its result or error (``final``)."""
    progress = Progress.from_fields(raw)
    if record is not None:
        state = record.state
    elif progress is not None:
        state = "running"
    else:
        state = "pending"  # queued, scheduled, or unknown: no record says more
    out: dict[str, Any] = {"id": None, "state": state,
                           "progress": progress.to_dict() if progress else None,
                           "final": bool(record is not None and record.is_final)}
    if out["final"]:
        assert record is not None
        if record.state == "succeeded":
            out["result"] = record.result
        else:
            out["error"] = {"type": record.error_type, "message": record.error_message,
                            "reason": record.reason}
    return out


async def afollow(broker: Broker, queue: str, message_id: str, *,
                  recheck_s: float = RECHECK_S) -> AsyncIterator[dict[str, Any]]:
    """Snapshots of a message (``snapshot()``) each time it changes, ending with the
    final one. Pushed by the progress and done channels; re-read every ``recheck_s``
    seconds all the same (a publish missed, or the memory broker)."""
    last: dict[str, Any] | None = None
    async with broker.progress.watch(queue, message_id) as changes:
        while True:
            record = await broker.aget_record(queue, message_id)
            now = snapshot(record, await aread_raw(broker, queue, message_id))
            now["id"] = message_id
            if now != last:
                last = now
                yield now
            if now["final"]:
                return
            await changes.wait(recheck_s)


def read(broker: Broker, queue: str, message_id: str) -> Progress | None:
    """The latest progress of a message, or None."""
    return Progress.from_fields(read_raw(broker, queue, message_id))


async def aread(broker: Broker, queue: str, message_id: str) -> Progress | None:
    return Progress.from_fields(await aread_raw(broker, queue, message_id))


def read_many(broker: Broker, which: list[tuple[str, str]]) -> list[Progress | None]:
    """The latest progress of each (queue, message id), in one round trip (the
    dashboard's running list)."""
    if not which:
        return []
    return [Progress.from_fields(raw) for raw in broker.progress.read_many(which)]


async def aread_many(broker: Broker, which: list[tuple[str, str]]) -> list[Progress | None]:
    if not which:
        return []
    return [Progress.from_fields(raw)
            for raw in await broker.progress.aread_many(which)]
