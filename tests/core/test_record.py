"""Record and DeadLetter: plain data that round-trips through the message codec."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

from blitzq_django.engine import DeadLetter, Record
from blitzq_django.engine.core import record as states
from blitzq_django.engine.core.message import Message, encode, pack


def test_record_round_trip_with_every_field() -> None:
    record = Record(id="m1", task="app.t", queue="q", state=states.SUCCEEDED, attempt=2,
                    result={"when": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
                            "amount": decimal.Decimal("9.99"), "ref": uuid.UUID(int=1),
                            "items": [1, 2]},
                    error_type=None, error_message=None, traceback=None, reason=None,
                    created_ms=1, started_ms=2, finished_ms=3, worker="host:1:abc")
    assert Record.from_bytes(record.to_bytes()) == record


def test_record_from_bytes_ignores_unknown_fields() -> None:
    # A newer engine may add fields; an older reader keeps working.
    data = pack({"id": "m", "task": "t", "queue": "q", "state": "failed", "future": 1})
    record = Record.from_bytes(data)
    assert record.state == states.FAILED
    assert record.is_final
    assert not record.succeeded


def test_final_states() -> None:
    for state in (states.SUCCEEDED, states.FAILED, states.DEAD_LETTERED, states.CANCELLED):
        assert Record(id="m", task="t", queue="q", state=state).is_final
    for state in (states.QUEUED, states.SCHEDULED, states.RUNNING, states.RETRYING):
        assert not Record(id="m", task="t", queue="q", state=state).is_final
    assert Record(id="m", task="t", queue="q", state=states.SUCCEEDED).succeeded


def test_dead_letter_round_trip_keeps_the_original_message() -> None:
    payload = encode(Message(id="m1", task="app.t", queue="q", args=(1, "two")))
    letter = DeadLetter(id="m1", queue="q", task="app.t", reason="retries exhausted",
                        payload=payload, attempt=3, delivery_count=1, error_type="ValueError",
                        error_message="boom", traceback="Traceback ...", dead_ms=5)
    again = DeadLetter.from_bytes(letter.to_bytes())
    assert again == letter
    assert again.message is not None
    assert again.message.args == [1, "two"]


def test_dead_letter_of_garbage_has_no_message() -> None:
    letter = DeadLetter(id="malformed:1-0", queue="q", task=None, reason="malformed message",
                        payload=b"\xc1 not msgpack")
    assert DeadLetter.from_bytes(letter.to_bytes()).message is None
