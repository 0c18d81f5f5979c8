"""Real schedulers on threads of the test process, each with a client (and Redis
connections) of its own, reading the code schedules and the database (as
``runscheduler`` does). Shared by the admin-schedule tests and the browser test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from blitzq_django import conf, periodic_db
from blitzq_django.engine.scheduler import Scheduler
from blitzq_django.periodic import SchedulerThread


@contextmanager
def running_schedulers(count: int = 1, **options: Any) -> Iterator[list[Scheduler]]:
    """``count`` schedulers running until the block ends; they are listening for
    changes (subscribed) when it starts."""
    from tests.support.waiting import wait_until

    options.setdefault("promote", False)
    threads: list[SchedulerThread] = []
    with ExitStack() as stack:
        for n in range(count):
            client = conf.build_client(conf.get_settings())
            scheduler = Scheduler(client, sources=[client.schedule_registry, periodic_db.source],
                                  name=f"test-scheduler-{n}", **options)
            thread = SchedulerThread(scheduler).start()
            threads.append(thread)
            stack.callback(thread.stop)
        wait_until(lambda: all(t.scheduler.listening or t.error for t in threads), timeout=20,
                   message="the schedulers subscribed")
        for thread in threads:
            assert thread.error is None, thread.error
        yield [t.scheduler for t in threads]
    for thread in threads:
        assert not thread.thread.is_alive(), f"{thread.scheduler.name} did not stop"
        assert thread.error is None, thread.error
