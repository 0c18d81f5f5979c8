"""Task history: events folded into TaskRecord rows by the writer (blitzq_django.history).

Merge rules on plain events; then the writer on a real Redis with a worker running the
testproject's tasks: every row right, re-applied batches change nothing, a crash
between commit and ack loses and duplicates nothing, failures-only and off modes,
redaction, one writer per queue (the lease), the settings checks.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from blitzq_django import conf, history
from blitzq_django.decorators import blitzq_task
from blitzq_django.engine.core import events as ev
from blitzq_django.engine.core.message import Message, encode
from blitzq_django.history import merge
from blitzq_django.history.writer import CONSUMER, GROUP, HistoryWriter, wait_caught_up
from blitzq_django.models import TaskRecord
from testproject.shop import tasks

from ..support.waiting import wait_until
from .conftest import running_worker


@blitzq_task(name="tests.history.login")
def login(user: str, password: str, *, api_token: str = "") -> str:
    return f"hello {user}"


@blitzq_task(name="tests.history.secret_result")
def secret_result() -> dict[str, str]:
    return {"user": "ann", "password": "hunter2"}


# -- merge rules (no database, no Redis) ---------------------------------------------------


def _payload(id_: str = "m1", args: Any = ("a",), kwargs: Any = None, key: str | None = None,
             task: str = "t.x") -> bytes:
    return encode(Message(id=id_, task=task, queue="default", args=list(args),
                          kwargs=kwargs or {}, created_ms=1_700_000_000_000,
                          idempotency_key=key))


def _event(n: int, kind: str, id_: str = "m1", **fields: Any) -> ev.Event:
    return ev.Event(f"1700000000{n:03d}-0", "default", kind, id_, "t.x",
                    1_700_000_000_000 + n, **fields)


def test_fold_builds_the_row_from_its_events() -> None:
    batch = [_event(1, ev.ENQUEUED, detail=_payload(kwargs={"n": 2}, key="k1")),
             _event(2, ev.STARTED, attempt=1, worker="w1"),
             _event(3, ev.RETRIED, attempt=1, worker="w1", duration_ms=1,
                    error_type="ValueError", detail=["boom", "Traceback ...", None]),
             _event(4, ev.STARTED, attempt=2, worker="w2"),
             _event(5, ev.SUCCEEDED, attempt=2, worker="w2", duration_ms=1)]
    changed, skipped = merge.fold({}, batch)
    row = changed["m1"]
    assert skipped == 0
    assert (row.state, row.attempt, row.worker, row.args, row.kwargs, row.idempotency_key) == (
        "succeeded", 2, "w2", ["a"], {"n": 2}, "k1")
    assert (row.error_type, row.error_message, row.traceback) == ("", "", "")
    assert row.created_ms == 1_700_000_000_000
    assert row.started_ms == 1_700_000_000_004 and row.finished_ms == 1_700_000_000_005
    assert [e[0] for e in row.timeline] == ["enqueued", "started", "retried", "started",
                                            "succeeded"]
    assert row.last_event == batch[-1].cursor and row.wants_result == 2


def test_events_spanning_batches_and_reapplied_batches() -> None:
    first = [_event(1, ev.ENQUEUED, detail=_payload()), _event(2, ev.STARTED, attempt=1)]
    second = [_event(3, ev.DEAD_LETTERED, attempt=1, error_type="KeyError",
                     detail=["'x'", "Traceback (most recent call last): ...", None])]
    rows: dict[str, merge.Row] = {}
    merge.fold(rows, first)
    changed, _ = merge.fold(rows, second)
    row = changed["m1"]
    assert (row.state, row.error_type, row.error_message) == ("dead_lettered", "KeyError", "'x'")
    assert row.args == ["a"] and len(row.timeline) == 3
    # Every batch again (a writer that died before its acks): nothing changes.
    again, _ = merge.fold(rows, first + second)
    assert again == {} and len(rows["m1"].timeline) == 3


def test_failures_only_keeps_failed_tasks_with_their_arguments() -> None:
    batch = [_event(1, ev.ENQUEUED, "ok", detail=_payload("ok")),
             _event(2, ev.SUCCEEDED, "ok", attempt=1),
             _event(3, ev.STARTED, "bad", attempt=1),
             _event(4, ev.FAILED, "bad", attempt=1, error_type="OSError",
                    detail=["disk", "tb", _payload("bad", args=[7])])]
    changed, _ = merge.fold({}, batch, failures_only=True)
    assert list(changed) == ["bad"]
    assert changed["bad"].args == [7] and changed["bad"].state == "failed"


def test_replay_starts_a_new_life_and_values_become_json() -> None:
    rows: dict[str, merge.Row] = {}
    merge.fold(rows, [_event(1, ev.ENQUEUED, detail=_payload()),
                      _event(2, ev.DEAD_LETTERED, attempt=1, error_type="E",
                             detail=["m", "tb", None]),
                      _event(3, ev.REPLAYED, attempt=1, detail=_payload())])
    row = rows["m1"]
    assert row.state == "queued" and row.finished_ms is None
    import datetime as dt
    import decimal
    import uuid
    value = {"d": dt.date(2026, 1, 2), "n": decimal.Decimal("1.5"), 1: b"\x00", "s": "a\x00b",
             "f": float("nan"), "u": uuid.UUID(int=1), "t": (1, 2)}
    assert merge.jsonable(value) == {"d": "2026-01-02", "n": "1.5", "1": "AA==",
                                     "s": "a\ufffdb", "f": "nan",
                                     "u": "00000000-0000-0000-0000-000000000001", "t": [1, 2]}


def test_the_longest_engine_task_id_fits_the_table() -> None:
    from blitzq_django.engine.core.validate import MAX_TASK_ID_LENGTH
    from blitzq_django.models import TaskRecord

    assert TaskRecord._meta.get_field("task_id").max_length == MAX_TASK_ID_LENGTH
    longest = "x" * MAX_TASK_ID_LENGTH
    changed, skipped = merge.fold({}, [_event(1, ev.ENQUEUED, longest)])
    assert list(changed) == [longest] and skipped == 0
    # Longer ids are refused at enqueue; one that got in anyway never stops the writer.
    changed, skipped = merge.fold({}, [_event(1, ev.ENQUEUED, longest + "x")])
    assert changed == {} and skipped == 1


# -- the writer on Redis and the database --------------------------------------------------


def _writer(**options: Any) -> HistoryWriter:
    settings = conf.get_settings()
    writer = history.writer_for(settings, ["default"], **options)
    assert writer is not None
    return writer


def _drain(writer: HistoryWriter) -> None:
    assert wait_caught_up(writer, 30), "the writer did not catch up"


def _all_final(handles: list[Any]) -> None:
    for handle in handles:
        try:
            handle.record(timeout=20)
        except Exception:  # noqa: BLE001 - failed records raise; final is all we need
            pass


@pytest.mark.django_db
def test_writer_writes_every_task_of_a_worker(blitzq_redis: Any) -> None:
    assert blitzq_redis.broker.event_details  # HISTORY "all" (the default)
    rate = tasks.fetch_exchange_rate.enqueue("USD")
    charge = tasks.charge_card.enqueue("order-1", fail_times=1)
    doomed = tasks.validate_card.enqueue("4000-0000-0000-0002")
    keyed = tasks.noop.options(idempotency_key="nightly-1").enqueue()
    secret = login.enqueue("ann", "hunter2", api_token="tok")
    with running_worker():
        _all_final([rate, charge, doomed, keyed, secret])
    writer = _writer()
    _drain(writer)
    rows = {r.task_id: r for r in TaskRecord.objects.all()}
    assert len(rows) == 5
    assert (rows[rate.id].state, rows[rate.id].result, rows[rate.id].args) == (
        "succeeded", 1.08, ["USD"])
    assert rows[rate.id].started_at and rows[rate.id].finished_at and rows[rate.id].worker
    c = rows[charge.id]
    assert (c.state, c.attempt, c.kwargs) == ("succeeded", 2, {"fail_times": 1})
    assert [e[0] for e in c.timeline] == ["enqueued", "started", "retried", "started",
                                          "succeeded"]
    d = rows[doomed.id]
    assert (d.state, d.error_type) == ("dead_lettered", "ValueError")
    assert "declined" in d.error_message and "Traceback" in d.traceback
    assert rows[keyed.id].idempotency_key == "nightly-1"
    s = rows[secret.id]
    assert s.args[0] == "ann" and "hunter2" not in str(s.args)
    assert s.kwargs["api_token"] != "tok"
    assert writer.stats.skipped == 0


@pytest.mark.django_db
def test_results_are_redacted(blitzq_redis: Any) -> None:
    handle = secret_result.enqueue()
    with running_worker():
        handle.result(timeout=20)
    _drain(_writer())
    row = TaskRecord.objects.get(task_id=handle.id)
    assert row.result["user"] == "ann" and row.result["password"] != "hunter2"


@pytest.mark.django_db
def test_a_crash_between_commit_and_ack_changes_nothing(blitzq_redis: Any,
                                                        monkeypatch: Any) -> None:
    handles = tasks.charge_card.enqueue_many([(f"o-{i}",) for i in range(20)])
    with running_worker():
        _all_final(handles)
    first = _writer()
    assert first._hold("default")
    events = blitzq_redis.read_events("default", GROUP, CONSUMER, 2000)
    monkeypatch.setattr(first.client, "ack_events", lambda *a: (_ for _ in ()).throw(
        ConnectionError("killed before the ack")))
    with pytest.raises(ConnectionError):
        first.write("default", events)
    monkeypatch.undo()
    before = {r.task_id: (r.state, len(r.timeline), r.last_event)
              for r in TaskRecord.objects.all()}
    assert len(before) == 20
    first.leases["default"].release()
    second = _writer()  # reads the pending batch first, writes it again
    _drain(second)
    after = {r.task_id: (r.state, len(r.timeline), r.last_event)
             for r in TaskRecord.objects.all()}
    assert after == before
    # charge_card fails twice: enqueued, (started, retried) x 2, started, succeeded
    assert all(state == "succeeded" and n == 7 for state, n, _ in after.values())
    pending = blitzq_redis.read_events("default", GROUP, CONSUMER, 2000, pending=True)
    assert pending == []


@pytest.mark.django_db
def test_idempotency_key_moves_to_the_newest_message(blitzq_redis: Any) -> None:
    writer = _writer()
    first = tasks.noop.options(idempotency_key="k").enqueue()
    _drain(writer)
    # The key's marker expires (its TTL); a new message takes the key.
    blitzq_redis.broker.sync.client.delete(blitzq_redis.broker.keys.queue("default").unique("k"))
    second = tasks.noop.options(idempotency_key="k").enqueue()
    assert second.id != first.id
    _drain(writer)
    assert TaskRecord.objects.get(task_id=second.id).idempotency_key == "k"
    assert TaskRecord.objects.get(task_id=first.id).idempotency_key is None


@pytest.mark.django_db
def test_failures_mode(settings: Any, redis_url: str, namespace: str) -> None:
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "QUEUES": ["default"],
                       "HISTORY": "failures"}
    ok = tasks.fetch_exchange_rate.enqueue("EUR")
    flaky = tasks.charge_card.enqueue("o-1", fail_times=1)
    doomed = tasks.validate_card.enqueue("4000")
    with running_worker():
        _all_final([ok, flaky, doomed])
    _drain(_writer())
    rows = {r.task_id: r for r in TaskRecord.objects.all()}
    assert set(rows) == {flaky.id, doomed.id}
    assert rows[flaky.id].state == "succeeded" and rows[flaky.id].args == ["o-1"]
    assert rows[doomed.id].args == ["4000"] and rows[doomed.id].state == "dead_lettered"


def test_history_off(settings: Any, redis_url: str, namespace: str) -> None:
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "HISTORY": "off"}
    assert history.companion(conf.get_settings()) is None
    assert conf.get_client().broker.event_details is False
    with pytest.raises(CommandError, match="history is off"):
        call_command("runhistory")
    settings.BLITZQ = {"REDIS_URL": redis_url, "NAMESPACE": namespace, "EVENTS": False}
    assert history.companion(conf.get_settings()) is None


def test_companion_runs_and_stops(blitzq_redis: Any, settings: Any) -> None:
    settings.BLITZQ = {**settings.BLITZQ, "HISTORY_WRITER": "thread"}  # in this process
    run = history.companion(conf.get_settings())
    assert run is not None
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(stop,), daemon=True)
    thread.start()
    lease = blitzq_redis.broker.keys.queue("default").history_lease
    redis = blitzq_redis.broker.sync.client
    wait_until(lambda: redis.exists(lease), 10, message="the writer to take the lease")
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and not redis.exists(lease)  # released on the way out


@pytest.mark.django_db
def test_one_writer_per_queue(blitzq_redis: Any) -> None:
    first, second = _writer(), _writer()
    assert first._hold("default") and not second._hold("default")
    tasks.noop.enqueue()
    assert second.step() == 0 and first.step() == 1
    first.leases["default"].release()
    assert second._hold("default")
    assert not first._hold("default")


def test_settings_checks(settings: Any) -> None:
    found = conf.problems({"HISTORY": "some"})
    assert [(p.id, p.key) for p in found] == [("blitzq.E012", "HISTORY")]
    found = conf.problems({"HISTORY_RETENTION": 0})
    assert [(p.id, p.key) for p in found] == [("blitzq.E012", "HISTORY_RETENTION")]
    assert [p.id for p in conf.problems({"HISTORY_RETENTION": True})] == ["blitzq.E003"]
    assert conf.problems({"HISTORY": "failures", "HISTORY_RETENTION": 0.5}) == []


@pytest.mark.django_db
def test_memory_broker_history(blitzq_memory: Any) -> None:
    handle = tasks.fetch_exchange_rate.enqueue("GBP")
    with running_worker():
        handle.result(timeout=10)
    _drain(_writer())
    row = TaskRecord.objects.get(task_id=handle.id)
    assert (row.state, row.args, row.result) == ("succeeded", ["GBP"], 0.85)


@pytest.mark.django_db
def test_a_writer_that_lost_its_lease_commits_nothing(blitzq_redis: Any) -> None:
    from blitzq_django.history.writer import LeaseLost

    writer = _writer()
    assert writer._hold("default")
    tasks.noop.enqueue()
    events = blitzq_redis.read_events("default", GROUP, CONSUMER, 100)
    lease = writer.leases["default"]
    # Another writer takes the queue while this one folds (a long pause, say).
    lease.release()
    other = _writer()
    assert other._hold("default")
    with pytest.raises(LeaseLost):
        writer.write("default", events)
    assert not TaskRecord.objects.exists()  # rolled back
    assert len(blitzq_redis.read_events("default", GROUP, CONSUMER, 100, pending=True)) == 1
    _drain(other)  # the new holder writes the batch
    assert TaskRecord.objects.count() == 1


@pytest.mark.django_db
def test_a_standby_writer_takes_over_when_the_holder_dies(blitzq_redis: Any) -> None:
    holder, standby = _writer(lease_ttl_ms=300), _writer(lease_ttl_ms=300)
    assert holder._hold("default") and not standby._hold("default")
    handle = tasks.noop.enqueue()
    # The holder reads a batch and dies before committing: nothing renews its lease.
    assert blitzq_redis.read_events("default", GROUP, CONSUMER, 100)
    wait_until(lambda: standby._hold("default"), 10, 0.02, "the standby to take the lease")
    _drain(standby)  # its predecessor's unacknowledged batch first
    assert TaskRecord.objects.get(task_id=handle.id).state == "queued"
