"""The scheduler: dispatch the occurrences of periodic schedules, exactly once each.

Any number of schedulers may run (for availability). Each one evaluates every schedule
and, when an occurrence is due, claims it with periodic.lua: a compare-and-set on the
schedule's latest handled occurrence, in the same atomic step that puts its message on
the queue. The first scheduler to claim an occurrence dispatches it; the others' claims
write nothing and tell them how far the schedule got. No leader, no lease: a scheduler
killed at any point leaves nothing half done, and the others carry on at the next
occurrence.

A scheduler also promotes due scheduled messages (promoting.py), so a deployment whose
workers run ``--no-promote`` still runs delayed tasks.

Missed runs (scheduler, Redis or deploy down) follow each schedule's ``missed`` policy
(core/schedules.py ``plan``). Schedules come from sources (registry.py); a publish on
``Keyspace.schedules_channel`` (or a new ``schedules_version``, read every 2 s) makes
every scheduler read its sources again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core import events
from ..core import record as states
from ..core.message import encode_fields, pack
from ..core.record import Record
from ..core.schedules import Schedule, first_baseline, plan
from ..core.validate import POLICY_OPTIONS, expiry_ms, priority_lane
from ..errors import BlitzqError, BrokerError, BrokerUnavailable
from .promoting import promote_forever

if TYPE_CHECKING:
    from ..client import Client
    from ..client.schedules import ScheduleSource

log = logging.getLogger("blitzq.scheduler")

MAX_SLEEP_S = 1.0  # the longest the loop sleeps between two looks at the clock
VERSION_CHECK_S = 2.0  # a missed "schedules changed" publish is noticed within this
RETRY_S = 1.0  # after a failed pass (Redis down)


@dataclass(frozen=True, slots=True)
class Dispatch:
    """What one claim did: ``dispatched`` occurrences put on the queue (0 when another
    scheduler had claimed them), ``missed`` left out by the policy."""

    schedule: str
    occurrences: tuple[int, ...]
    through_ms: int
    dispatched: int
    missed: int
    previous_ms: int


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Scheduler:
    def __init__(self, client: Client, *, sources: Sequence[ScheduleSource] | None = None,
                 promote: bool = True, queues: Sequence[str] = (),
                 poll_interval: float = 0.5, name: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.broker = client.broker
        self.store = client.broker.periodic  # brokers/capabilities.py PeriodicStore
        self.sources: list[ScheduleSource] = list(
            sources if sources is not None else [client.schedule_registry])
        self.promote = promote
        self.extra_queues = tuple(queues)
        self.poll_interval = poll_interval
        self.name = name or default_name()
        self.clock = clock
        #: the valid, loaded schedules by name
        self.schedules: dict[str, Schedule] = {}
        #: schedule name -> latest occurrence known handled (by anyone)
        self.handled: dict[str, int] = {}
        #: schedule name -> (handled, schedule, its next occurrence after it)
        self._next: dict[str, tuple[int, Schedule, int | None]] = {}
        self.problems: list[str] = []
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._reload = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = False
        self._version: int | None = None
        self._version_checked = 0.0
        #: each source's schedules as last read (kept while it cannot be read)
        self._loaded: dict[int, list[Schedule]] = {}
        #: when to read the sources again after one failed (monotonic), None: no failure
        self._source_retry: float | None = None
        self._failing: set[int] = set()  # sources whose last read failed
        self.source_retry_s = RETRY_S
        self.dispatched = 0
        #: subscribed to the "schedules changed" channel
        self.listening = False

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- schedules -------------------------------------------------------------------

    async def load(self) -> None:
        """Read every source; keep what is known of schedules that stay."""
        found: dict[str, Schedule] = {}
        problems: list[str] = []
        self._source_retry = None
        for index, source in enumerate(self.sources):
            try:
                loaded = list(source.load()) if hasattr(source, "add") else \
                    await asyncio.to_thread(lambda s=source: list(s.load()))  # type: ignore[misc]
                self._loaded[index] = loaded
                if index in self._failing:
                    self._failing.discard(index)
                    log.info("scheduler %s: schedule source %r read again", self.name, source)
            except Exception as exc:  # noqa: BLE001 - one source down does not stop the others
                # (a database of schedules): keep what it gave last, read it again soon.
                loaded = self._loaded.get(index, [])
                log.log(logging.DEBUG if index in self._failing else logging.WARNING,
                        "scheduler %s: schedule source %r could not be read (%s: %s); its %d "
                        "schedule(s) read before are kept, reading it again every %.1fs",
                        self.name, source, type(exc).__name__, exc, len(loaded),
                        self.source_retry_s)
                self._failing.add(index)
                self._source_retry = time.monotonic() + self.source_retry_s
            for schedule in loaded:
                if schedule.name in found:
                    problems.append(f"schedule {schedule.name!r} comes from two sources; "
                                    f"the first ({found[schedule.name].source}) is used")
                    continue
                if self.client.registry.find(schedule.task) is None:
                    problems.append(f"schedule {schedule.name!r}: task {schedule.task!r} is "
                                    "not registered; it is not dispatched")
                    continue
                found[schedule.name] = schedule
        for text in problems:
            if text not in self.problems:
                log.error("%s", text)
        self.problems = problems
        added = [s for n, s in found.items() if n not in self.schedules]
        now = self.now_ms()
        for name, schedule in list(found.items()):
            old = self.schedules.get(name)
            if old is not None and name in self.handled and (
                    old.when != schedule.when or (schedule.enabled and not old.enabled)):
                # A new timing (or enabled again): what the old one missed is not owed.
                try:
                    self.handled[name] = max(self.handled[name], first_baseline(schedule, now))
                except Exception as exc:  # noqa: BLE001 - one schedule's maths, not the others
                    self._broken(schedule, exc, found)
        self.schedules = found
        self.handled = {n: v for n, v in self.handled.items() if n in found}
        if added:
            await self._read_handled([s for s in added if s.name in found], now)
        log.info("scheduler %s: %d schedule(s): %s", self.name, len(found),
                 ", ".join(f"{s.name} ({s.describe()})" for s in found.values()) or "none")

    def queue_of(self, schedule: Schedule) -> str:
        spec = self.client.registry.find(schedule.task)
        return (schedule.queue or self.client.route(schedule.task)
                or (spec.queue if spec is not None else self.client.default_queue))

    async def _read_handled(self, schedules: Iterable[Schedule], now_ms: int) -> None:
        by_queue: dict[str, list[Schedule]] = {}
        for schedule in schedules:
            by_queue.setdefault(self.queue_of(schedule), []).append(schedule)
        for queue, group in by_queue.items():
            stored = await self.store.handled(queue, [s.name for s in group])
            for schedule, value in zip(group, stored, strict=True):
                # Never dispatched: its past occurrences are not missed runs.
                try:
                    self.handled[schedule.name] = (first_baseline(schedule, now_ms)
                                                   if value is None else value)
                except Exception as exc:  # noqa: BLE001 - one schedule's maths, not the others
                    self._broken(schedule, exc)

    def _broken(self, schedule: Schedule, exc: BaseException,
                found: dict[str, Schedule] | None = None) -> None:
        """A schedule whose occurrences cannot be computed: logged at ERROR with its
        traceback and left out until the sources are read again; the others go on."""
        text = (f"schedule {schedule.name!r} ({schedule.describe()}) is left out: its "
                f"occurrences cannot be computed ({type(exc).__name__}: {exc})")
        log.error("scheduler %s: %s", self.name, text, exc_info=exc)
        self.problems.append(text)
        for known in (found, self.schedules):
            if known is not None and known.get(schedule.name) is schedule:
                del known[schedule.name]
        self.handled.pop(schedule.name, None)
        self._next.pop(schedule.name, None)

    # -- one pass --------------------------------------------------------------------

    async def tick(self, now_ms: int | None = None) -> list[Dispatch]:
        """Claim and dispatch what is due at ``now_ms`` (default: the clock's now)."""
        now = self.now_ms() if now_ms is None else now_ms
        done: list[Dispatch] = []
        for schedule in list(self.schedules.values()):
            if not schedule.enabled:
                continue
            last = self.handled.get(schedule.name)
            if last is None:
                await self._read_handled([schedule], now)
                last = self.handled.get(schedule.name)
                if last is None:
                    continue  # left out: its maths failed
            try:
                due = self._next_after(schedule, last)
                if due is None or due > now:
                    continue  # the usual case: nothing to compute
                todo = plan(schedule, last, now)
            except Exception as exc:  # noqa: BLE001 - one schedule's maths, not the others
                self._broken(schedule, exc)
                continue
            if todo is None:
                continue
            try:
                done.append(await self._claim(schedule, todo.dispatch, todo.through,
                                              todo.missed, todo.more, now, last))
            except (BrokerError, OSError):
                raise  # Redis: the whole pass is tried again
            except BlitzqError as exc:  # this schedule's message cannot be built
                log.error("schedule %s: %s; not dispatched", schedule.name, exc)
                self.handled[schedule.name] = todo.through  # not again at every pass
            except Exception as exc:  # noqa: BLE001 - one bad schedule, not the others
                self._broken(schedule, exc)
        return done

    async def _claim(self, schedule: Schedule, occurrences: tuple[int, ...], through: int,
                     missed: int, more: bool, now: int, last: int) -> Dispatch:
        spec = self.client.registry.find(schedule.task)
        assert spec is not None  # load() keeps only schedules of registered tasks
        queue = self.queue_of(schedule)
        options = schedule.options
        priority = priority_lane(options["priority"]) if "priority" in options else spec.priority
        built = [self._occurrence(schedule, spec, queue, priority, o, now) for o in occurrences]
        info = pack({"o": occurrences[-1] if occurrences else through,
                     "id": schedule.occurrence_id(occurrences[-1]) if occurrences else None,
                     "at": now, "by": self.name, "missed": missed})
        dispatched, previous = await self.store.claim(queue, priority, schedule.name, through,
                                                      built, info)
        self.handled[schedule.name] = max(previous, through)
        if dispatched:
            self.dispatched += dispatched
            log.info("dispatched %s: %s", schedule.name,
                     ", ".join(schedule.occurrence_id(o) for o in occurrences[-dispatched:]))
        if missed and last < previous < through:
            # Another scheduler handled some of them first: the ones missed are only those
            # after what it handled (else each scheduler would report the same hole).
            again = plan(schedule, previous, now)
            missed, more = (again.missed, again.more) if again is not None else (0, False)
        if missed and previous < through:
            log.warning("schedule %s: %d%s missed occurrence(s) %s (missed=%r)", schedule.name,
                        missed, "+" if more else "",
                        "skipped" if schedule.missed != "run_all" else "beyond catch_up",
                        schedule.missed)
        return Dispatch(schedule.name, occurrences, through, dispatched, missed, previous)

    def _occurrence(self, schedule: Schedule, spec: Any, queue: str, priority: str | None,
                    occurrence_ms: int, now: int) -> tuple[int, str, bytes, bytes, bytes]:
        client = self.client
        options = schedule.options
        message_id = schedule.occurrence_id(occurrence_ms)
        headers = dict(options.get("headers") or {})
        headers.setdefault("periodic", schedule.name)
        policy = {k: options[k] for k in POLICY_OPTIONS if k in options} or None
        expires = options.get("expires", spec.expires)
        payload = encode_fields(
            message_id, spec.name, queue, list(schedule.args), dict(schedule.kwargs), 1, now,
            None, options.get("timeout"), None, headers, policy, client.max_message_size,
            expires_ms=None if expires is None else expiry_ms(
                expires, now, f"schedule {schedule.name!r}: "),
            priority=priority)
        record = b""
        if client.track_state:
            record = Record(id=message_id, task=spec.name, queue=queue, state=states.QUEUED,
                            created_ms=now).to_bytes()
        event = b""
        if self.broker.events_maxlen:
            fields: list[Any] = [events.ENQUEUED, message_id, spec.name, now, None, None, None,
                                 None]
            if self.broker.event_details:
                fields.append(events.message_detail(payload))
            event = events.packer().pack(fields)
        return occurrence_ms, message_id, payload, record, event

    def _next_after(self, schedule: Schedule, handled: int) -> int | None:
        """The schedule's first occurrence after ``handled``, cached (a cron search per
        schedule per pass would add up)."""
        cached = self._next.get(schedule.name)
        if cached is not None and cached[0] == handled and cached[1] is schedule:
            return cached[2]
        due = schedule.next_after(handled)
        self._next[schedule.name] = (handled, schedule, due)
        return due

    def next_due_ms(self) -> int | None:
        now = self.now_ms()
        due = []
        for schedule in list(self.schedules.values()):
            if not schedule.enabled:
                continue
            try:
                found = self._next_after(schedule, self.handled.get(schedule.name, now))
            except Exception as exc:  # noqa: BLE001 - one schedule's maths, not the others
                self._broken(schedule, exc)
                continue
            if found is not None:
                due.append(found)
        return min(due, default=None)

    # -- running -----------------------------------------------------------------------

    def queues(self) -> list[str]:
        """The queues this scheduler promotes: the client's, its schedules' and any given."""
        names = {*self.client.known_queues(), *self.extra_queues,
                 *(self.queue_of(s) for s in self.schedules.values())}
        return sorted(names)

    async def run(self, *, install_signal_handlers: bool = False,
                  close_broker: bool = False) -> None:
        """Dispatch (and promote) until ``stop()`` or SIGTERM/SIGINT."""
        self._loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(signum, self._on_signal, signum)
        if self._stop_requested:
            self._stop.set()
        helpers: list[asyncio.Task[Any]] = []
        try:
            await self._start()
            if self._stop.is_set():
                return
            helpers.append(asyncio.create_task(self._listen_changes(), name="blitzq-changes"))
            if self.promote:
                helpers.append(asyncio.create_task(
                    promote_forever(self.broker, self.queues(), self._stop, self.poll_interval),
                    name="blitzq-promoter"))
            log.info("scheduler %s running (promoting: %s)", self.name,
                     ",".join(self.queues()) if self.promote else "no")
            while not self._stop.is_set():
                await self._sleep(await self._pass())
        finally:
            self._stop.set()
            for helper in helpers:
                helper.cancel()
            for helper in helpers:
                with contextlib.suppress(BaseException):
                    await helper
            if close_broker:
                with contextlib.suppress(Exception):
                    await self.broker.aclose()
            log.info("scheduler %s stopped (%d dispatched)", self.name, self.dispatched)

    async def _start(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                await self.load()
                return
            except (BrokerUnavailable, OSError) as exc:
                log.warning("scheduler %s cannot reach Redis, retrying in %.1fs: %s",
                            self.name, backoff, exc)
                await self._sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    async def _pass(self) -> float:
        """One look at the clock: reload if told to, dispatch what is due; how long to
        sleep."""
        try:
            if time.monotonic() - self._version_checked >= VERSION_CHECK_S:
                self._version_checked = time.monotonic()
                version = await self.store.version()
                if self._version is not None and version != self._version:
                    self._reload = True
                self._version = version
            if self._reload or (self._source_retry is not None
                                and time.monotonic() >= self._source_retry):
                self._reload = False
                try:
                    await self.load()
                except BaseException:
                    self._reload = True  # Redis failed meanwhile: read them again
                    raise
            await self.tick()
        except (BlitzqError, OSError) as exc:
            log.warning("scheduler %s: %s; trying again in %.1fs", self.name, exc, RETRY_S)
            return RETRY_S
        next_due = self.next_due_ms()
        if next_due is None:
            return MAX_SLEEP_S
        return min(MAX_SLEEP_S, max(0.0, (next_due - self.now_ms()) / 1000))

    async def _sleep(self, seconds: float) -> None:
        waiters = [asyncio.ensure_future(self._stop.wait()),
                   asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        self._wake.clear()

    async def _listen_changes(self) -> None:
        def changed() -> None:
            self._reload = True
            self._wake.set()

        def listening() -> None:
            self.listening = True
            self._reload = True  # what changed before this subscription is read too
            self._wake.set()

        while not self._stop.is_set():
            try:
                await self.store.listen_changes(changed, listening)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the version poll covers the gap
                log.debug("schedule change listener: %s", exc)
            self.listening = False
            with contextlib.suppress(TimeoutError):  # back off before subscribing again
                await asyncio.wait_for(self._stop.wait(), RETRY_S)

    def reload(self) -> None:
        """Read the sources again at the next pass (thread-safe)."""
        self._reload = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def stop(self) -> None:
        """Stop after the current pass (thread-safe; before run() it returns at once)."""
        self._stop_requested = True
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed: it stopped already
                self._loop.call_soon_threadsafe(self._stop.set)

    def _on_signal(self, signum: int) -> None:
        log.info("%s: scheduler %s stopping", signal.Signals(signum).name, self.name)
        self._stop.set()
