"""InFlight: every delivery a worker holds, one entry each, with its state.

It is the only record of what the worker holds, so every question is answered
from it: how many slots are busy (running attempts), which leases to renew (all
of them, until their settlement is written), whether a recovered entry is one
the worker already holds (then it is not run again), and what to hand back at
shutdown (what is prefetched, and what still runs past the deadline).

Slots: at most ``concurrency`` attempts run at once, and at most a queue's own cap
(``queue_concurrency``) of one queue. Decoded entries wait for a slot in their
queue's line, one line per priority lane, highest first; free slots go to the
queues in turn, so a flooded queue cannot starve a quiet one.

States, in order (an entry only moves forward)::

    prefetched -> running -> settling -> (removed once its settlement is written)
    prefetched ----------->  settling      (rejected, requeued, lease lost)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..brokers.base import Delivery, Settlement
from ..core.states import HeldState

# Bound once: compared (``is``) for every message.
PREFETCHED, RUNNING, SETTLING = HeldState.PREFETCHED, HeldState.RUNNING, HeldState.SETTLING

#: Index of each priority's line (Delivery.priority), highest first.
_LINE = {"high": 0, None: 1, "low": 2}

Key = tuple[str, str, "str | None"]  # Delivery.key: (queue, entry id, priority)
#: (queue, message id) of every revoked message (revocations.py): one set for the
#: worker's life, shared by the parts that look ids up in it
Revoked = set[tuple[str, str]]
#: Hands a held delivery's settlement over (Worker.settle: to the flusher).
Settle = Callable[["Held", Settlement], None]


class QueueSlots:
    """One queue's share: its cap, its running attempts, what it holds, its lines."""

    __slots__ = ("queue", "cap", "running", "held", "lines", "waiting")

    def __init__(self, queue: str, cap: int) -> None:
        self.queue = queue
        self.cap = cap
        self.running = 0
        self.held = 0  # entries of this queue in the table
        self.lines: tuple[deque[Held], deque[Held], deque[Held]] = (deque(), deque(), deque())
        self.waiting = 0  # entries in the lines, stale ones included until popped


class Held:
    """One delivery held by this worker."""

    __slots__ = ("delivery", "key", "message", "spec", "state", "since", "runner", "lost",
                 "slots", "cancelled", "started_ms", "start_written")

    def __init__(self, delivery: Delivery, key: Key, since: float, slots: QueueSlots) -> None:
        self.delivery = delivery
        self.key = key
        self.message: Any = None  # decoded Message, once decoded
        self.spec: Any = None  # its TaskSpec, once found
        self.state: HeldState = PREFETCHED
        #: monotonic time the lease was last known good (fetched, claimed or renewed)
        self.since = since
        self.runner: Any = None  # the asyncio.Task of a running `async def` attempt
        self.lost = False  # a renewal found it owned by another consumer
        self.cancelled = False  # revoked while running (current_task().cancelled)
        self.slots = slots  # its queue's share
        self.started_ms = 0  # when its attempt's body began (wall ms); 0: not yet
        #: listed in the running index (with its "started" event, if that goes on its
        #: own) by the flusher while it ran (flusher.py)
        self.start_written = False

    def __repr__(self) -> str:
        return f"<Held {self.key[1]!r} on {self.key[0]!r} {self.state}>"


class InFlight:
    def __init__(self, concurrency: int, caps: dict[str, int] | None = None) -> None:
        self.concurrency = concurrency
        self.running = 0  # entries in state RUNNING: the busy slots
        self.waiting = 0  # entries in every queue's lines (stale ones until popped)
        self._caps = caps or {}
        self._held: dict[Key, Held] = {}
        self._queues: dict[str, QueueSlots] = {}
        self._turn: deque[QueueSlots] = deque()  # queues in the order they get free slots

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[Held]:
        return iter(list(self._held.values()))

    def slots(self, queue: str) -> QueueSlots:
        slots = self._queues.get(queue)
        if slots is None:
            cap = min(self._caps.get(queue, self.concurrency), self.concurrency)
            slots = self._queues[queue] = QueueSlots(queue, cap)
            self._turn.append(slots)
        return slots

    def get(self, key: Key) -> Held | None:
        return self._held.get(key)

    def admit(self, delivery: Delivery, now: float) -> Held | None:
        """Hold a new delivery; None when this worker already holds that entry."""
        key = (delivery.queue, delivery.entry_id, delivery.priority)
        if key in self._held:
            return None
        slots = self._queues.get(delivery.queue) or self.slots(delivery.queue)
        held = self._held[key] = Held(delivery, key, now, slots)
        slots.held += 1
        return held

    def can_start_now(self, held: Held) -> bool:
        """A slot is free for ``held`` and nothing of its queue waits ahead of it."""
        slots = held.slots
        return (self.running < self.concurrency and slots.running < slots.cap
                and not slots.waiting)

    def wait_for_slot(self, held: Held, first: bool = False) -> None:
        slots = held.slots
        line = slots.lines[_LINE[held.delivery.priority]]
        if first:
            line.appendleft(held)
        else:
            line.append(held)
        slots.waiting += 1
        self.waiting += 1

    def next_ready(self) -> Held | None:
        """The next prefetched entry to start, or None: queues take turns, and within a
        queue the highest priority line goes first. Stale entries are dropped on the way."""
        if self.running >= self.concurrency:
            return None
        turn = self._turn
        for _ in range(len(turn)):
            slots = turn[0]
            turn.rotate(-1)
            if slots.waiting and slots.running < slots.cap:
                held = self._first_in_line(slots)
                if held is not None:
                    return held
        return None

    def _first_in_line(self, slots: QueueSlots) -> Held | None:
        for line in slots.lines:
            while line:
                held = line[0]
                if held.state is PREFETCHED and self._held.get(held.key) is held:
                    return held
                line.popleft()
                slots.waiting -= 1
                self.waiting -= 1
        return None

    def start(self, held: Held) -> None:
        """``held`` takes a slot (the caller checked that one is free)."""
        slots = held.slots
        if slots.waiting:
            line = slots.lines[_LINE[held.delivery.priority]]
            if line and line[0] is held:
                line.popleft()
                slots.waiting -= 1
                self.waiting -= 1
        held.state = RUNNING
        self.running += 1
        slots.running += 1

    def settling(self, held: Held) -> bool:
        """Its settlement is being handed over; False if it is no longer this worker's
        to settle (requeued at shutdown while its thread ran on, or dropped)."""
        if held.state is SETTLING or self._held.get(held.key) is not held:
            return False
        if held.state is RUNNING:
            self.running -= 1
            held.slots.running -= 1
        held.state = SETTLING
        return True

    def settled(self, key: Key) -> None:
        """Its settlement was written (or given up): the entry leaves the table."""
        held = self._held.get(key)
        if held is not None and held.state is SETTLING:
            del self._held[key]
            held.slots.held -= 1

    def remove(self, key: Key) -> Held | None:
        held = self._held.pop(key, None)
        if held is not None:
            held.slots.held -= 1
            if held.state is RUNNING:
                self.running -= 1
                held.slots.running -= 1
        return held

    def in_state(self, state: HeldState) -> list[Held]:
        return [h for h in self._held.values() if h.state is state]

    def renewable(self) -> list[Held]:
        """Every entry whose lease is still this worker's: settling ones too, since their
        write may be slow, and an unrenewed lease would let another worker take them."""
        return [h for h in self._held.values() if not h.lost]
