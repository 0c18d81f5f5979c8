"""InFlight: every delivery a worker holds, one entry each, with its state.

It is the only record of what the worker holds, so every question is answered
from it: how many slots are busy (running attempts), which leases to renew (all
of them, until their settlement is written), whether a recovered entry is one
the worker already holds (then it is not run again), and what to hand back at
shutdown (what is prefetched, and what still runs past the deadline).

States, in order (an entry only moves forward)::

    prefetched -> running -> settling -> (removed once its settlement is written)
    prefetched ----------->  settling      (rejected, requeued, lease lost)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from ..brokers.base import Delivery

PREFETCHED = "prefetched"  # held, not started: waits for decoding or for a slot
RUNNING = "running"  # its attempt executes and holds a slot
SETTLING = "settling"  # its settlement is handed to the flusher, not yet written


class Held:
    """One delivery held by this worker."""

    __slots__ = ("delivery", "key", "message", "spec", "state", "since", "runner", "lost")

    def __init__(self, delivery: Delivery, key: tuple[str, str], since: float) -> None:
        self.delivery = delivery
        self.key = key
        self.message: Any = None  # decoded Message, once decoded
        self.spec: Any = None  # its TaskSpec, once found
        self.state = PREFETCHED
        #: monotonic time the lease was last known good (fetched, claimed or renewed)
        self.since = since
        self.runner: Any = None  # the asyncio.Task of a running `async def` attempt
        self.lost = False  # a renewal found it owned by another consumer

    def __repr__(self) -> str:
        return f"<Held {self.key[1]!r} on {self.key[0]!r} {self.state}>"


class InFlight:
    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.running = 0  # entries in state RUNNING: the busy slots
        self._held: dict[tuple[str, str], Held] = {}
        #: decoded, prefetched entries in start order; recovered ones go first. Entries
        #: that left the table or the prefetched state are skipped when popped.
        self.ready: deque[Held] = deque()

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[Held]:
        return iter(list(self._held.values()))

    def get(self, key: tuple[str, str]) -> Held | None:
        return self._held.get(key)

    def admit(self, delivery: Delivery, now: float) -> Held | None:
        """Hold a new delivery; None when this worker already holds that entry."""
        key = (delivery.queue, delivery.entry_id)
        if key in self._held:
            return None
        held = self._held[key] = Held(delivery, key, now)
        return held

    def wait_for_slot(self, held: Held, first: bool = False) -> None:
        if first:
            self.ready.appendleft(held)
        else:
            self.ready.append(held)

    def next_ready(self) -> Held | None:
        """The next prefetched entry that is still held, or None."""
        ready = self.ready
        while ready:
            held = ready[0]
            if held.state is PREFETCHED and self._held.get(held.key) is held:
                return held
            ready.popleft()
        return None

    def start(self, held: Held) -> None:
        """``held`` takes a slot (the caller checked that one is free)."""
        if self.ready and self.ready[0] is held:
            self.ready.popleft()
        held.state = RUNNING
        self.running += 1

    def settling(self, held: Held) -> bool:
        """Its settlement is being handed over; False if it is no longer this worker's
        to settle (requeued at shutdown while its thread ran on, or dropped)."""
        if held.state is SETTLING or self._held.get(held.key) is not held:
            return False
        if held.state is RUNNING:
            self.running -= 1
        held.state = SETTLING
        return True

    def settled(self, key: tuple[str, str]) -> None:
        """Its settlement was written (or given up): the entry leaves the table."""
        held = self._held.get(key)
        if held is not None and held.state is SETTLING:
            del self._held[key]

    def remove(self, key: tuple[str, str]) -> Held | None:
        held = self._held.pop(key, None)
        if held is not None and held.state is RUNNING:
            self.running -= 1
        return held

    def in_state(self, state: str) -> list[Held]:
        return [h for h in self._held.values() if h.state is state]

    def renewable(self) -> list[Held]:
        """Every entry whose lease is still this worker's: settling ones too, since their
        write may be slow, and an unrenewed lease would let another worker take them."""
        return [h for h in self._held.values() if not h.lost]
