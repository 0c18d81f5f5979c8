#!/usr/bin/env python3
"""The task-history soak: N no-op tasks through real ``manage.py runworker`` processes
with history on, and how many rows they leave, final and lost.

    python3 bench/history_soak.py                       # 200,000 tasks, 2 runworkers, PostgreSQL
    python3 bench/history_soak.py --tasks 20000 --database sqlite --events-maxlen 2000

The producer (this process) enqueues in chunks of 1,000 as fast as Redis takes them,
while the runworkers (each with its history writer, a child process 10 nicer than its
worker: the default) drain them; then it waits until every row is final, or the deadline.
Prints one line: rows by state, duplicates, events counted lost and unwritable, when the
last task ran and when the last row was final, how long the events stream got and how far
the writer fell behind. The database is one of the run's own (created and dropped).

Before issue 19 this soak (200,000, 2 runworkers, PostgreSQL, EVENTS_MAXLEN 100,000) left
54,085 rows missing and 37,486 not final; the events the writer had not read were
trimmed by the stream's cap. tests/fault/test_history_soak.py is the same at 20,000
tasks in CI. Needs redis-server on PATH (or REDIS_URL) and PostgreSQL at 127.0.0.1:5432
(user postgres) for --database postgres.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2, help="runworker processes")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--events-maxlen", type=int, default=100_000)
    parser.add_argument("--hard-maxlen", type=int, default=None,
                        help="EVENTS_HARD_MAXLEN (default: the setting's, 1,000,000)")
    parser.add_argument("--deadline", type=float, default=3600.0, help="seconds")
    args = parser.parse_args()

    import os

    from tests.fault.history_soak import Database, run
    from tests.support.redis_server import RedisServer

    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        server = RedisServer().start()
        url = server.url
    with tempfile.TemporaryDirectory(prefix="blitzq-soak-") as tmp:
        database = Database(args.database, Path(tmp))
        try:
            began = time.monotonic()
            result = run(tasks=args.tasks, database=database, redis_url=url, tmp=Path(tmp),
                         workers=args.workers, events_maxlen=args.events_maxlen,
                         hard_maxlen=args.hard_maxlen, concurrency=args.concurrency,
                         deadline_s=args.deadline,
                         say=lambda text: print(f"  {text}", flush=True))
            print(result.line())
            print(f"took {time.monotonic() - began:.0f} s in all")
        finally:
            database.drop()
            if server is not None:
                server.stop()
    complete = (result.rows, result.final, result.duplicated) == (args.tasks, args.tasks, 0)
    print("complete: every task has one final row" if complete
          else "INCOMPLETE: see the counts above")
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
