"""Schedules as pure values (core/schedules.py): cron in a time zone across DST, epoch-
aligned intervals, missed-run plans, and the errors of bad declarations."""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest

from blitzq_django.engine.core.schedules import Cron, Every, build, first_baseline, plan
from blitzq_django.engine.errors import ConfigurationError

HOUR = 3_600_000
DAY = 24 * HOUR


def ms(tz: str, *fields: int, fold: int = 0) -> int:
    return int(dt.datetime(*fields, tzinfo=ZoneInfo(tz), fold=fold).timestamp() * 1000)


def local(tz: str, instant: int) -> str:
    return dt.datetime.fromtimestamp(instant / 1000, ZoneInfo(tz)).isoformat()


def run(cron: Cron, start: int, count: int) -> list[str]:
    out, t = [], start
    for _ in range(count):
        t = cron.next_after(t)
        out.append(local(cron.tz, t))
    return out


# -- DST: spring-forward gap skipped, fall-back repeated wall time fires once --------------

ZONES = {
    # zone: (spring-forward day, fall-back day, offsets before/after spring)
    "Europe/Berlin": ((2026, 3, 29), (2026, 10, 25), ("+01:00", "+02:00")),
    "America/New_York": ((2026, 3, 8), (2026, 11, 1), ("-05:00", "-04:00")),
}


@pytest.mark.parametrize("tz", ZONES)
def test_a_daily_wall_time_in_the_spring_forward_gap_is_skipped(tz: str) -> None:
    spring, _fall, (winter, summer) = ZONES[tz]
    cron = Cron("30 2 * * *", tz)
    day_before = dt.date(*spring) - dt.timedelta(days=1)
    got = run(cron, ms(tz, *day_before.timetuple()[:3], 0, 0), 3)
    # 02:30 does not exist on the spring day: the day before, then the day after.
    assert got == [f"{day_before.isoformat()}T02:30:00{winter}",
                   f"{dt.date(*spring) + dt.timedelta(days=1)}T02:30:00{summer}",
                   f"{dt.date(*spring) + dt.timedelta(days=2)}T02:30:00{summer}"]


@pytest.mark.parametrize("tz", ZONES)
def test_an_hourly_cron_has_no_run_in_the_gap(tz: str) -> None:
    spring, _fall, (winter, summer) = ZONES[tz]
    cron = Cron("0 * * * *", tz)
    got = run(cron, ms(tz, *spring, 0, 30), 3)
    day = dt.date(*spring).isoformat()
    assert got == [f"{day}T01:00:00{winter}", f"{day}T03:00:00{summer}",
                   f"{day}T04:00:00{summer}"]


@pytest.mark.parametrize("tz", ZONES)
def test_a_wall_time_repeated_at_fall_back_fires_once(tz: str) -> None:
    _spring, fall, (winter, summer) = ZONES[tz]
    repeated = "01:30" if tz == "America/New_York" else "02:30"
    hour = int(repeated[:2])
    cron = Cron(f"30 {hour} * * *", tz)
    got = run(cron, ms(tz, *fall, 0, 0), 2)
    day = dt.date(*fall)
    # Once, at its first instant (summer time); the second pass of the hour fires nothing.
    assert got == [f"{day}T{repeated}:00{summer}",
                   f"{day + dt.timedelta(days=1)}T{repeated}:00{winter}"]
    # From inside the second pass (fold=1), the next one is tomorrow's, and the last
    # one is the first pass's.
    second_pass = ms(tz, *fall, hour, 40, fold=1)
    assert local(tz, cron.next_after(second_pass)) == \
        f"{day + dt.timedelta(days=1)}T{repeated}:00{winter}"
    assert local(tz, cron.last_at_or_before(second_pass)) == f"{day}T{repeated}:00{summer}"


@pytest.mark.parametrize("tz", ZONES)
def test_an_hourly_cron_runs_once_per_wall_hour_across_fall_back(tz: str) -> None:
    _spring, fall, (winter, summer) = ZONES[tz]
    hour = 1 if tz == "America/New_York" else 2
    cron = Cron("0 * * * *", tz)
    got = run(cron, ms(tz, *fall, hour - 1, 30), 3)
    day = dt.date(*fall).isoformat()
    assert got == [f"{day}T{hour:02}:00:00{summer}", f"{day}T{hour + 1:02}:00:00{winter}",
                   f"{day}T{hour + 2:02}:00:00{winter}"]


def test_an_interval_ignores_dst_and_is_aligned_on_the_epoch() -> None:
    every = Every(HOUR)
    start = ms("America/New_York", 2026, 11, 1, 0, 10)
    t, got = start, []
    for _ in range(4):
        t = every.next_after(t)
        got.append(t)
    assert all(x % HOUR == 0 for x in got)
    assert [b - a for a, b in itertools.pairwise(got)] == [HOUR] * 3


def test_nicknames_names_ranges_and_steps() -> None:
    start = ms("UTC", 2026, 1, 1, 0, 0)  # a Thursday
    assert local("UTC", Cron("@daily").next_after(start)) == "2026-01-02T00:00:00+00:00"
    assert local("UTC", Cron("@hourly").next_after(start)) == "2026-01-01T01:00:00+00:00"
    assert run(Cron("0 9 * * mon-fri"), start, 2) == ["2026-01-01T09:00:00+00:00",
                                                      "2026-01-02T09:00:00+00:00"]
    assert run(Cron("*/20 1-2 * jan *"), start, 4)[-1] == "2026-01-01T02:00:00+00:00"


# -- missed runs -------------------------------------------------------------------------


def every_minute(missed: str, **options: object) -> object:
    return build("m", "t", every=60, missed=missed, **options)


@pytest.mark.parametrize(("policy", "dispatched", "missed"), [
    ("run_all", 10, 0), ("run_once", 1, 9), ("skip", 0, 10)])
def test_missed_run_policies_after_a_downtime(policy: str, dispatched: int,
                                              missed: int) -> None:
    schedule = every_minute(policy)
    last = 1_000 * 60_000
    now = last + 10 * 60_000 + 30_000  # down for 10.5 minutes: 10 occurrences missed
    todo = plan(schedule, last, now)  # type: ignore[arg-type]
    assert todo is not None
    assert len(todo.dispatch) == dispatched and todo.missed == missed
    assert todo.through == last + 10 * 60_000
    if dispatched == 1:
        assert todo.dispatch == (todo.through,)  # the latest one


def test_run_all_is_capped_at_catch_up_keeping_the_latest() -> None:
    schedule = every_minute("run_all", catch_up=3)
    todo = plan(schedule, 0, 10 * 60_000)  # type: ignore[arg-type]
    assert todo is not None and todo.dispatch == (8 * 60_000, 9 * 60_000, 10 * 60_000)
    assert todo.missed == 7


def test_skip_still_runs_an_occurrence_that_is_only_a_little_late() -> None:
    schedule = every_minute("skip", grace=5)
    assert plan(schedule, 0, 60_000 + 4_000).dispatch == (60_000,)  # type: ignore[arg-type, union-attr]
    assert plan(schedule, 0, 60_000 + 6_000).dispatch == ()  # type: ignore[arg-type, union-attr]


def test_nothing_is_due_before_the_next_occurrence() -> None:
    schedule = every_minute("run_once")
    assert plan(schedule, 60_000, 119_999) is None  # type: ignore[arg-type]
    assert plan(schedule, 60_000, 120_000).dispatch == (120_000,)  # type: ignore[arg-type, union-attr]


def test_cron_missed_runs_across_a_day() -> None:
    schedule = build("c", "t", cron="0 * * * *", tz="Europe/Berlin", missed="run_all",
                     catch_up=5)
    last = ms("Europe/Berlin", 2026, 3, 29, 0, 0)
    todo = plan(schedule, last, last + 5 * HOUR)
    assert todo is not None and len(todo.dispatch) == 5
    # 5 real hours: 01:00, then 03:00 to 06:00 (02:00 does not exist): all fit in catch_up
    assert [local("Europe/Berlin", o)[11:16] for o in todo.dispatch] == [
        "01:00", "03:00", "04:00", "05:00", "06:00"]
    assert todo.missed == 0 and not todo.more
    todo = plan(schedule, last, last + 6 * HOUR)
    assert todo is not None and todo.missed == 1 and todo.more


def test_a_new_schedule_does_not_run_its_past() -> None:
    schedule = every_minute("run_all")
    seen = 10 * 60_000 + 5
    assert plan(schedule, first_baseline(schedule, seen), seen) is None  # type: ignore[arg-type]


# -- bad declarations: an error naming the schedule and the field ------------------------


@pytest.mark.parametrize(("options", "words"), [
    ({"cron": "61 * * * *"}, ["'nightly'", "cron", "61 * * * *"]),
    ({"cron": "* * * *"}, ["'nightly'", "5 fields"]),
    ({"cron": "0 0 * * * *"}, ["'nightly'", "5 fields"]),
    ({"cron": "@fortnightly"}, ["'nightly'", "nickname"]),
    ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, ["'nightly'", "tz", "Mars/Olympus"]),
    ({"every": 0}, ["'nightly'", "every"]),
    ({"every": -5}, ["'nightly'", "every"]),
    ({"every": dt.timedelta(seconds=-1)}, ["'nightly'", "every"]),
    ({"every": float("nan")}, ["'nightly'", "every"]),
    ({"every": True}, ["'nightly'", "every"]),
    ({}, ["'nightly'", "exactly one"]),
    ({"cron": "@daily", "every": 5}, ["'nightly'", "exactly one"]),
    ({"every": 5, "missed": "sometimes"}, ["'nightly'", "missed"]),
    ({"every": 5, "catch_up": 0}, ["'nightly'", "catch_up"]),
    ({"every": 5, "args": (object(),)}, ["'nightly'", "args[0]"]),
    ({"every": 5, "kwargs": {"when": {1, 2}}}, ["'nightly'", "when"]),
    ({"every": 5, "queue": "no spaces"}, ["'nightly'", "queue"]),
    ({"every": 5, "timeout": -1}, ["'nightly'", "timeout"]),
    ({"every": 5, "priority": "urgent"}, ["'nightly'", "priority"]),
    ({"every": 5, "expires": dt.datetime(2030, 1, 1)}, ["'nightly'", "expires"]),
    ({"every": 5, "delay": 3}, ["'nightly'", "delay"]),
])
def test_bad_declarations_name_the_schedule_and_the_field(options: dict, words: list) -> None:
    with pytest.raises(ConfigurationError) as caught:
        build("nightly", "app.tasks.cleanup", **options)
    for word in words:
        assert word in str(caught.value), str(caught.value)


@pytest.mark.parametrize("name", ["", "has space", "x" * 151, "tab\there", 7])
def test_schedule_names_are_checked(name: object) -> None:
    with pytest.raises(ConfigurationError, match="schedule name"):
        build(name, "t", every=5)


def test_a_good_declaration_keeps_its_options() -> None:
    schedule = build("n", "t", cron="0 3 * * *", tz="Europe/Berlin", args=[1],
                     kwargs={"a": 2}, queue="q", priority="high", retries=2, timeout=30)
    assert schedule.args == (1,) and schedule.kwargs == {"a": 2}
    assert schedule.priority == "high" and schedule.options["retries"] == 2
    assert schedule.describe() == "cron '0 3 * * *' Europe/Berlin"
    assert build("i", "t", every=dt.timedelta(minutes=5)).describe() == "every 300s"
