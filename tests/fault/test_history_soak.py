"""A soak of task history (issue 19, item 11): 20,000 tasks through 2 separate
``manage.py runworker`` processes, each with its history writer process, EVENTS_MAXLEN
2,000. The producer enqueues in a burst, far faster than a writer 10 nicer than the
workers reads: before the writer kept its unread events (EVENTS_HARD_MAXLEN), the
stream's cap trimmed most of them unread and thousands of rows were missing or not
final, with nothing logged. Now every task has exactly one row, in its final state, and
nothing is counted lost. SQLite, and PostgreSQL when one is reachable.

The full 200,000-task soak on PostgreSQL is bench/history_soak.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support.redis_server import RedisServer
from .history_soak import Database, postgres_reachable, run
from .ledger import REPORTS

pytestmark = pytest.mark.fault

TASKS = 20_000
EVENTS_MAXLEN = 2_000


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_every_task_of_a_soak_has_one_final_row(fault_redis: RedisServer, tmp_path: Path,
                                                kind: str) -> None:
    if kind == "postgres" and not postgres_reachable():
        pytest.skip("no PostgreSQL at 127.0.0.1:5432 (user postgres) to soak against")
    database = Database(kind, tmp_path)
    try:
        result = run(tasks=TASKS, database=database, redis_url=fault_redis.url, tmp=tmp_path,
                     workers=2, events_maxlen=EVENTS_MAXLEN, deadline_s=600)
    finally:
        database.drop()
    REPORTS.append(f"[fault] history soak: {result.line()}")
    assert result.peak_stream > EVENTS_MAXLEN  # the writer was behind what used to be kept
    assert (result.rows, result.final, result.duplicated) == (TASKS, TASKS, 0), result.line()
    assert result.states == {"succeeded": TASKS}
    assert (result.lost, result.gaps, result.unwritable) == (0, 0, 0)
