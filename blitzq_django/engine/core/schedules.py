"""Periodic schedules: cron (with a time zone) and epoch-aligned intervals. Pure values.

A ``Schedule`` says when a task runs (its *occurrences*, instants in ms since the epoch),
with which arguments, and what to do about occurrences that nobody dispatched in time
(``missed``). Everything here is arithmetic on instants: no Redis, no clock, no event
loop, so the rules below are tested directly (tests/engine/test_schedules.py).

Cron and time zones. A cron expression is read in the wall time of ``tz`` (an IANA zone,
default UTC): its candidate wall times are iterated without a zone (croniter on naive
datetimes) and each is mapped to an instant through zoneinfo:

* a wall time in the spring-forward gap (02:30 on the night clocks jump from 02:00 to
  03:00) does not exist: it is **skipped**, never moved to 03:00;
* a wall time repeated at fall-back (01:30 happens twice) fires **once**, at its first
  instant (``fold=0``); the repeated hour's second pass fires nothing.

Intervals (``every``) are instants, not wall times: an occurrence each ``every`` ms since
the epoch (``every=3600`` fires on the hour in UTC and in every zone whose offset is whole
hours), unaffected by DST.

The occurrence id of an occurrence is ``periodic:<name>:<ms>``: the message id of what it
dispatches, the same whichever scheduler dispatches it.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import MAX_SECONDS, ConfigurationError, MessageError
from . import validate
from .message import encode_fields
from .names import check_name
from .suggest import did_you_mean

MISSED_POLICIES = ("skip", "run_once", "run_all")
DEFAULT_MISSED = "run_once"
#: run_all dispatches at most this many missed occurrences (the most recent ones)
DEFAULT_CATCH_UP = 100
MAX_CATCH_UP = 10_000
#: skip: an occurrence reached at most this late still runs (it is not "missed")
DEFAULT_GRACE_S = 10.0
MIN_EVERY_MS = 10
MAX_NAME_LENGTH = 150
#: options a schedule may pass to each message it dispatches
MESSAGE_OPTIONS = frozenset({"timeout", "expires", "headers", "priority",
                             *validate.POLICY_OPTIONS})
NICKNAMES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
             "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
             "@hourly": "0 * * * *"}
_UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1)
#: a cron search gives up after this many candidate wall times (a "30 2 30 2 *" never fires)
_MAX_CANDIDATES = 100_000


def occurrence_id(name: str, occurrence_ms: int) -> str:
    """The message id of one occurrence: the same in every scheduler."""
    return f"periodic:{name}:{occurrence_ms}"


def _name_problem(name: Any) -> str | None:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LENGTH:
        return f"must be a string of 1 to {MAX_NAME_LENGTH} characters, got " \
               f"{validate.short_repr(name)}"
    if not name.isprintable() or re.search(r"\s", name):
        return f"must have no whitespace or control characters, got {validate.short_repr(name)}"
    return None


def check_schedule_name(name: Any) -> str:
    found = _name_problem(name)
    if found:
        raise ConfigurationError(f"schedule name {found}")
    return name


def zone(tz: Any, context: str = "") -> ZoneInfo:
    """The ZoneInfo of an IANA name (or a ZoneInfo / UTC tzinfo); ConfigurationError else."""
    if isinstance(tz, ZoneInfo):
        return tz
    if tz is _UTC:
        return ZoneInfo("UTC")
    if not isinstance(tz, str) or not tz:
        raise ConfigurationError(f"{context}tz must be an IANA time zone name like "
                                 f"'Europe/Berlin', got {validate.short_repr(tz)}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(f"{context}tz {tz!r} is not a known IANA time zone (like "
                                 "'Europe/Berlin' or 'UTC')") from None


# -- when -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cron:
    """A 5-field cron expression (or an ``@daily``-style nickname) in a time zone."""

    expression: str
    tz: str = "UTC"
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_zone", zone(self.tz))
        object.__setattr__(self, "tz", str(self._zone.key))
        expanded = cron_problem(self.expression)
        if expanded:
            raise ConfigurationError(expanded)

    @property
    def _expression(self) -> str:
        text = " ".join(self.expression.split())
        return NICKNAMES.get(text.lower(), text)

    def _instant(self, wall: dt.datetime) -> int | None:
        """The first instant (ms) of a wall time, or None when it does not exist (gap)."""
        aware = wall.replace(tzinfo=self._zone, fold=0)
        utc = aware.astimezone(_UTC)
        if utc.astimezone(self._zone).replace(tzinfo=None) != wall:
            return None  # in the spring-forward gap: skipped
        return _ms(utc)

    def _wall(self, ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, self._zone)

    def _candidates(self, start: dt.datetime, forward: bool) -> Iterator[dt.datetime]:
        from croniter import croniter  # lazy: cost (only a cron schedule needs it)

        it = croniter(self._expression, start)
        step = it.get_next if forward else it.get_prev
        for _ in range(_MAX_CANDIDATES):
            try:
                candidate = step(dt.datetime)
            except (ValueError, OverflowError):  # CroniterBadDateError: no more dates
                return
            yield candidate

    def next_after(self, ms: int) -> int | None:
        """The first occurrence strictly after instant ``ms``, None if there is none."""
        wall = self._wall(ms).replace(tzinfo=None, fold=0)
        for candidate in self._candidates(wall, True):
            instant = self._instant(candidate)
            # A repeated wall time's first instant may lie before ``ms`` (it is then the
            # second pass of a fall-back hour): not an occurrence after ``ms``.
            if instant is not None and instant > ms:
                return instant
            if candidate.year > 9998:
                return None
        return None

    def last_at_or_before(self, ms: int) -> int | None:
        """The latest occurrence at or before instant ``ms``, None if there is none."""
        local = self._wall(ms)
        wall = local.replace(tzinfo=None, fold=0)
        if local.fold == 1:  # the second pass of a fall-back hour: its first instants are past
            wall += (local.replace(fold=0).utcoffset() or dt.timedelta()) - (
                local.utcoffset() or dt.timedelta())
        for candidate in self._candidates(wall + dt.timedelta(seconds=1), False):
            instant = self._instant(candidate)
            if instant is not None and instant <= ms:
                return instant
            if candidate.year < 1971:
                return None
        return None

    def describe(self) -> str:
        return f"cron {self.expression!r} {self.tz}"


@dataclass(frozen=True, slots=True)
class Every:
    """An interval: an occurrence every ``ms`` milliseconds, aligned on the epoch."""

    ms: int

    def __post_init__(self) -> None:
        if not (type(self.ms) is int and MIN_EVERY_MS <= self.ms <= MAX_SECONDS * 1000):
            raise ConfigurationError(f"every must be at least {MIN_EVERY_MS / 1000} s and at "
                                     f"most {MAX_SECONDS} s, got {self.ms} ms")

    def next_after(self, ms: int) -> int | None:
        return (ms // self.ms + 1) * self.ms

    def last_at_or_before(self, ms: int) -> int | None:
        return ms // self.ms * self.ms

    def count(self, after_ms: int, until_ms: int) -> int:
        """Occurrences in (after_ms, until_ms]."""
        return max(0, until_ms // self.ms - after_ms // self.ms)

    def describe(self) -> str:
        seconds = self.ms / 1000
        return f"every {seconds:g}s"


When = Cron | Every


def cron_problem(expression: Any) -> str | None:
    """Why ``expression`` is not a 5-field cron expression or a nickname, or None."""
    if not isinstance(expression, str) or not expression.strip():
        return f"cron must be a cron expression string, got {validate.short_repr(expression)}"
    text = " ".join(expression.split())
    if text.startswith("@"):
        if text.lower() in NICKNAMES:
            return None
        return (f"cron {expression!r} is not a known nickname (one of "
                f"{', '.join(sorted(NICKNAMES))})")
    if len(text.split(" ")) != 5:
        return (f"cron {expression!r} must have 5 fields (minute hour day-of-month month "
                f"day-of-week), it has {len(text.split(' '))}")
    from croniter import croniter  # lazy: cost (only a cron schedule needs it)

    try:
        it = croniter(text, _EPOCH)
    except (ValueError, KeyError, TypeError) as exc:  # CroniterBadCronError is a ValueError
        return f"cron {expression!r} is not a valid cron expression: {exc}"
    try:
        # A valid expression may name no day that exists ("0 0 30 2 *": February 30th):
        # refused here, where it enters (code, settings, the admin form), not by every
        # scheduler failing to find its next occurrence.
        it.get_next(dt.datetime)
    except (ValueError, KeyError, TypeError, OverflowError):  # CroniterBadDateError
        return (f"cron {expression!r} never fires: no date matches its day-of-month and "
                "month fields (like February 30th)")
    return None


def every_ms(every: Any, context: str = "") -> int:
    """An interval (seconds, or a timedelta) in whole ms; refuses 0, negative, NaN, bools."""
    if isinstance(every, dt.timedelta):
        seconds: Any = every.total_seconds()
    else:
        seconds = every
    if (not isinstance(seconds, int | float) or isinstance(seconds, bool)
            or not math.isfinite(seconds) or seconds <= 0):
        raise ConfigurationError(f"{context}every must be a number of seconds over 0 or a "
                                 f"positive timedelta, got {validate.short_repr(every)}")
    ms = round(seconds * 1000)
    if not MIN_EVERY_MS <= ms <= MAX_SECONDS * 1000:
        raise ConfigurationError(f"{context}every must be from {MIN_EVERY_MS / 1000} s to "
                                 f"{MAX_SECONDS} s, got {validate.short_repr(every)}")
    return ms


# -- the schedule ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Schedule:
    """One periodic task: what runs, when, and what to do about missed occurrences.

    ``queue`` None: the task's queue (after routes). ``options``: message options of
    each dispatch (timeout, expires, headers, priority, retries, initial_delay,
    max_delay, factor, jitter). ``source`` says where it was declared ("code",
    "settings", "db"...), for people.
    """

    name: str
    task: str
    when: When
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    missed: str = DEFAULT_MISSED
    catch_up: int = DEFAULT_CATCH_UP
    grace_ms: int = int(DEFAULT_GRACE_S * 1000)
    enabled: bool = True
    source: str = "code"

    def next_after(self, ms: int) -> int | None:
        return self.when.next_after(ms)

    def describe(self) -> str:
        return self.when.describe()

    def occurrence_id(self, occurrence_ms: int) -> str:
        return occurrence_id(self.name, occurrence_ms)

    @property
    def priority(self) -> str | None:
        return validate.priority_lane(self.options.get("priority"))


def build(name: Any, task: str, *, cron: Any = None, every: Any = None, tz: Any = None,
          args: Any = (), kwargs: Any = None, queue: Any = None, missed: Any = DEFAULT_MISSED,
          catch_up: Any = DEFAULT_CATCH_UP, grace: Any = DEFAULT_GRACE_S,
          enabled: bool = True, source: str = "code", **options: Any) -> Schedule:
    """A checked Schedule: every problem is a ConfigurationError naming the schedule and
    the field (``schedule 'nightly': tz 'Mars/Olympus' is not a known IANA time zone``)."""
    check_schedule_name(name)
    where = f"schedule {name!r}: "
    try:
        return _build(name, task, cron, every, tz, args, kwargs, queue, missed, catch_up,
                      grace, enabled, source, options)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}{exc}") from None
    except MessageError as exc:
        raise ConfigurationError(f"{where}{exc}") from None


def _build(name: str, task: str, cron: Any, every: Any, tz: Any, args: Any, kwargs: Any,
           queue: Any, missed: Any, catch_up: Any, grace: Any, enabled: bool, source: str,
           options: dict[str, Any]) -> Schedule:
    if (cron is None) == (every is None):
        raise ConfigurationError("give exactly one of cron= (a cron expression) or every= "
                                 "(seconds or a timedelta)")
    when: When
    if cron is not None:
        when = Cron(cron, "UTC" if tz is None else tz)
    else:
        if tz is not None:
            zone(tz)  # checked all the same; an interval is zone-free
        when = Every(every_ms(every))
    if missed not in MISSED_POLICIES:
        raise ConfigurationError(f"missed must be one of {', '.join(map(repr, MISSED_POLICIES))}"
                                 f", got {validate.short_repr(missed)}")
    if not (type(catch_up) is int and 1 <= catch_up <= MAX_CATCH_UP):
        raise ConfigurationError(f"catch_up must be an integer from 1 to {MAX_CATCH_UP}, got "
                                 f"{validate.short_repr(catch_up)}")
    if (not isinstance(grace, int | float) or isinstance(grace, bool) or not math.isfinite(grace)
            or not 0 <= grace <= MAX_SECONDS):
        raise ConfigurationError(f"grace must be a number of seconds from 0, got "
                                 f"{validate.short_repr(grace)}")
    if not isinstance(task, str) or not task:
        raise ConfigurationError(f"task must be a task name, got {validate.short_repr(task)}")
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise ConfigurationError(f"args must be a list or tuple, got {validate.short_repr(args)}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping):
        raise ConfigurationError(f"kwargs must be a dict, got {validate.short_repr(kwargs)}")
    if queue is not None:
        check_name("queue", queue)
    unknown = set(options) - MESSAGE_OPTIONS
    if unknown:
        raise ConfigurationError(f"unknown option(s) {', '.join(sorted(unknown))}."
                                 f"{did_you_mean(min(unknown), MESSAGE_OPTIONS)} Accepted: "
                                 f"{', '.join(sorted(MESSAGE_OPTIONS))}")
    options = {k: v for k, v in options.items() if v is not None}
    priority = validate.priority_lane(options.get("priority"))
    if "expires" in options:
        validate.check_expires(options["expires"])
        if isinstance(options["expires"], dt.datetime):
            raise ConfigurationError("expires must be seconds or a timedelta (each dispatch "
                                     "expires that long after it), not a datetime")
    for key in ("timeout", "headers", *validate.POLICY_OPTIONS):
        if key in options:
            validate.check(key, options[key])
    # Arguments that cannot be encoded fail now, naming the argument, not at 3 a.m.
    encode_fields(occurrence_id(name, 0), task, queue or "default", list(args), dict(kwargs), 1,
                  0, None, options.get("timeout"), None, dict(options.get("headers") or {}),
                  None, expires_ms=None, priority=priority)
    return Schedule(name=name, task=task, when=when, args=tuple(args), kwargs=dict(kwargs),
                    queue=queue, options=options, missed=missed, catch_up=catch_up,
                    grace_ms=int(grace * 1000), enabled=bool(enabled), source=source)


# -- missed runs -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """What one scheduler pass does about a schedule: dispatch ``dispatch`` (ascending)
    and mark every occurrence up to ``through`` handled. ``missed``: occurrences in
    (last, through] that are not dispatched; ``more``: there were more than counted."""

    dispatch: tuple[int, ...]
    through: int
    missed: int = 0
    more: bool = False


def plan(schedule: Schedule, last_ms: int, now_ms: int) -> Plan | None:
    """What to do at ``now_ms`` when every occurrence up to ``last_ms`` was handled.

    None: nothing is due. Otherwise, for the occurrences in (last, now]:

    * ``run_all``: each, up to ``catch_up`` of them (the most recent; older ones missed);
    * ``run_once``: the latest one only, the others missed;
    * ``skip``: the latest one if it is at most ``grace`` late, else none; the rest missed.
    """
    when = schedule.when
    latest = when.last_at_or_before(now_ms)
    if latest is None or latest <= last_ms:
        return None
    if schedule.missed == "run_all":
        wanted = schedule.catch_up
        found = [latest]
        cursor: int | None = latest
        while len(found) <= wanted:  # one more than wanted: is anything left over?
            cursor = when.last_at_or_before(cursor - 1)  # type: ignore[operator]
            if cursor is None or cursor <= last_ms:
                break
            found.append(cursor)
        more = len(found) > wanted
        dispatch = tuple(sorted(found[:wanted]))
        total = when.count(last_ms, latest) if isinstance(when, Every) else len(found)
        return Plan(dispatch, latest, total - len(dispatch), more and not isinstance(when, Every))
    # run_once and skip: one at most; count what is left out (cheaply, for the log)
    if isinstance(when, Every):
        total, more = when.count(last_ms, latest), False
    else:
        total, more, cursor = 1, False, latest
        while True:
            cursor = when.last_at_or_before(cursor - 1)  # type: ignore[operator]
            if cursor is None or cursor <= last_ms:
                break
            total += 1
            if total > MAX_CATCH_UP:
                more = True
                break
    if schedule.missed == "skip" and now_ms - latest > schedule.grace_ms:
        return Plan((), latest, total, more)
    return Plan((latest,), latest, total - 1, more)


def first_baseline(schedule: Schedule, seen_ms: int) -> int:
    """The "handled through" of a schedule nothing ever dispatched, first seen at
    ``seen_ms``: its occurrences before it are not missed runs, it did not exist then."""
    last = schedule.when.last_at_or_before(seen_ms)
    return seen_ms if last is None else last


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def ms_to_datetime(ms: int, tz: str = "UTC") -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, zone(tz))
