"""RateGate: admission of the messages whose task has a rate limit (docs/rate-limits.md).

Admission (fetching.py) hands the gate each decoded delivery whose task has a
``rate_limit`` or a ``rate_key``, instead of offering it to a slot. The gate groups
what arrived in the same turn of the event loop by bucket and takes tokens for each
group in one call (rate.lua: a fetched batch of 100 costs one round trip, not 100).
The granted ones are offered to a slot; the others are deferred: acked and put back
on their queue's schedule as the same attempt (no attempt is used), due when a token
will be there, one token interval apart (``outcome.deferred``). The promoter brings
them back like any scheduled message, so nothing polls the bucket.

Every path is total: a delivery handed to the gate is offered, deferred, failed (a
``rate_key`` that names no bucket with a rate: failed without a retry, with an error
saying so) or requeued (the worker is stopping). A take that fails (Redis down, a
refused script) defers the group by DEFER_ON_ERROR_MS instead of holding it.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..brokers.base import Broker, Settlement
from ..core import deadletter as reasons
from ..core.ids import now_ms
from ..core.rates import Rate, bucket_problem, bucket_rate
from ..core.states import HeldState, RecordState, SettleKind
from ..core.task import TaskSpec
from ..errors import MAX_RETRY_DELAY_S, ConfigurationError
from . import outcome, tasklog
from .inflight import Held, InFlight, Settle

log = logging.getLogger("blitzq.worker")

#: How long a message waits when its tokens could not be taken (Redis unreachable or
#: refusing): it is deferred that long, never held by the worker until Redis answers.
DEFER_ON_ERROR_MS = 1000
_MAX_DELAY_MS = int(MAX_RETRY_DELAY_S * 1000)

PREFETCHED = HeldState.PREFETCHED
Group = list[tuple[Held, bool]]  # (delivery, recovered: ahead of the others)


class RateGate:
    def __init__(self, *, broker: Broker, name: str, inflight: InFlight,
                 options: outcome.SettleOptions, settle: Settle,
                 offer: Callable[[Held, bool], None], rates: Mapping[str, Rate],
                 tasks: Iterable[TaskSpec], stopping: asyncio.Event,
                 wake_fetcher: Callable[[], None]) -> None:
        self._broker = broker
        self._name = name
        self._inflight = inflight
        self._options = options
        self._settle = settle
        self._offer = offer  # the executor's: to a slot
        self._stopping = stopping
        self._wake_fetcher = wake_fetcher
        self._rates: dict[str, Rate] = dict(rates)  # the client's named buckets
        self._waiting: dict[tuple[str, Rate], Group] = {}
        self._flush_due = False
        self._takes: set[asyncio.Future[None]] = set()
        for spec in tasks:
            key = spec.rate_key
            if isinstance(key, str) and spec.rate_limit is None and key not in self._rates:
                log.error("task %r names rate bucket %r, which is not in the client's "
                          "rate_limits: its messages will fail without running", spec.name, key)

    def admit(self, held: Held, first: bool = False) -> None:
        """A decoded delivery of a rate-limited task: it runs once a token is taken."""
        try:
            bucket, rate = self._bucket(held)
        except Exception as exc:  # noqa: BLE001 - a rate_key callable may raise anything
            self._fail(held, exc)
            return
        group = self._waiting.get((bucket, rate))
        if group is None:
            group = self._waiting[(bucket, rate)] = []
        group.append((held, first))
        if not self._flush_due:
            # After this turn of the loop: the rest of a fetched batch joins its bucket.
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _bucket(self, held: Held) -> tuple[str, Rate]:
        spec, message = held.spec, held.message
        key = spec.rate_key
        if key is None:
            return spec.name, spec.rate_limit
        if callable(key):
            try:
                name = key(*message.args, **message.kwargs)
            except Exception as exc:  # noqa: BLE001
                raise ConfigurationError(f"task {spec.name!r}: its rate_key raised "
                                         f"{type(exc).__name__}: {outcome.describe(exc)}") from exc
            problem = bucket_problem(name)
            if problem:
                raise ConfigurationError(f"task {spec.name!r}: its rate_key returned no bucket "
                                         f"name: {problem}")
        else:
            name = key
        return name, bucket_rate(name, spec.rate_limit, self._rates, spec.name)

    def _flush(self) -> None:
        self._flush_due = False
        waiting, self._waiting = self._waiting, {}
        for (bucket, rate), group in waiting.items():
            try:
                take = asyncio.ensure_future(self._take(bucket, rate, group))
            except Exception as exc:  # noqa: BLE001 - a closed loop: the group still ends
                log.error("rate bucket %r: cannot take tokens (%r)", bucket, exc)
                self._release(group, rate, DEFER_ON_ERROR_MS)
                continue
            self._takes.add(take)
            take.add_done_callback(self._takes.discard)

    async def _take(self, bucket: str, rate: Rate, group: Group) -> None:
        try:
            granted, wait_ms = await self._broker.take_tokens(
                bucket, rate.capacity, rate.refill_per_ms, len(group))
        except asyncio.CancelledError:
            self._release(group, rate, DEFER_ON_ERROR_MS)
            raise
        except Exception as exc:  # noqa: BLE001 - whatever failed, the group ends somewhere
            log.warning("rate bucket %r: taking tokens failed, deferring %d message(s) by "
                        "%d ms: %s", bucket, len(group), DEFER_ON_ERROR_MS, exc)
            granted, wait_ms = 0, DEFER_ON_ERROR_MS
        self._release(group, rate, wait_ms, granted)

    def _release(self, group: Group, rate: Rate, wait_ms: int, granted: int = 0) -> None:
        """Offer the first ``granted`` of ``group``; defer the rest, one token interval apart."""
        now = now_ms()
        interval = rate.interval_ms
        for i, (held, first) in enumerate(group):
            if held.state is not PREFETCHED or self._inflight.get(held.key) is not held:
                continue  # requeued by a shutdown, or dropped after a lost lease, meanwhile
            try:
                if self._stopping.is_set():
                    self._settle(held, outcome.requeued(held.delivery, held.message,
                                                        self._options))
                elif i < granted:
                    self._offer(held, first)
                else:
                    delay = min(wait_ms + math.ceil((i - granted) * interval), _MAX_DELAY_MS)
                    self._settle(held, outcome.deferred(held.delivery, held.message,
                                                        now + max(delay, 1), self._options))
            except Exception as exc:  # noqa: BLE001 - settling must be total
                self._last_resort(held, exc, now)

    def _fail(self, held: Held, error: BaseException) -> None:
        """Its bucket cannot be found: the attempt fails without a retry, saying why."""
        message = held.message
        now = now_ms()
        try:
            settlement = _not_retryable(outcome.failed(held.delivery, message, held.spec,
                                                       error, now, now, self._options,
                                                       retry=False))
            tasklog.failed(held, settlement, error, now, now, self._name)
            self._settle(held, settlement)
        except Exception as exc:  # noqa: BLE001
            self._last_resort(held, exc, now)

    def _last_resort(self, held: Held, error: BaseException, now: int) -> None:
        """Defer the delivery's bytes as they are; failing even that, let go of it (its
        lease lapses and it is delivered again): never held forever."""
        log.error("message %r could not be admitted (%r): deferring it as is",
                  getattr(held.message, "id", None), error)
        delivery = held.delivery
        message_id: Any = getattr(held.message, "id", None) or delivery.entry_id
        try:
            self._settle(held, Settlement(
                delivery, SettleKind.RETRY, message_id, body=delivery.payload or b"",
                due_ms=now + DEFER_ON_ERROR_MS, state=RecordState.SCHEDULED))
        except Exception:  # noqa: BLE001
            log.exception("message %r: letting go of it (redelivered after its lease)",
                          message_id)
            if self._inflight.remove(held.key) is not None:
                self._wake_fetcher()


def _not_retryable(settlement: Settlement) -> Settlement:
    """A dead letter's reason says "not retryable" (not "retries exhausted", which is what
    failed() says of an error its retry policy would retry): nothing was attempted."""
    letter, failure = settlement.letter, settlement.failure
    if letter is None or letter.reason == reasons.NOT_RETRYABLE:
        return settlement
    letter = replace(letter, reason=reasons.NOT_RETRYABLE)
    if failure is not None:
        failure = replace(failure, reason=reasons.NOT_RETRYABLE)
    record = failure.to_bytes() if settlement.record and failure is not None else b""
    return settlement._replace(body=letter.to_bytes(), letter=letter, failure=failure,
                               record=record)
