"""The transactional outbox under SIGKILL: committed durable messages are published exactly
once, rolled-back ones never, whatever process dies.

A producer process (the test project, no relay in it) enqueues durable messages, each in
a transaction with an Order row, rolling back every fourth; it is SIGKILLed mid-stream,
between its commits and any publish. Two ``manage.py runoutbox`` relays then publish
side by side; one is SIGKILLed while publishing. What reached Redis is read straight off
the stream and compared with the committed Orders: lost and duplicated must be 0.
"""

from __future__ import annotations

import signal
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from blitzq_django.engine import RedisBroker
from blitzq_django.engine.core.message import decode

from ..support.redis_server import RedisServer
from ..support.waiting import wait_until
from .ledger import REPORTS
from .test_effectively_once import DjangoProcess, FaultDatabase, base_env, fault_database

pytestmark = [pytest.mark.fault, pytest.mark.slow]

PRODUCER = """
import sys, threading
import django
django.setup()
from django.db import transaction
from testproject.shop import tasks
from testproject.shop.models import Order

n, mode = int(sys.argv[1]), sys.argv[2]

class Rollback(Exception):
    pass

for i in range(n):
    try:
        with transaction.atomic():
            Order.objects.create(reference=f"o{i}", amount_cents=i)
            if mode == "durable":
                tasks.record_delivery.options(durable=True).enqueue(f"o{i}")
            else:
                tasks.record_delivery.enqueue_on_commit(f"o{i}")
            if i % 4 == 3:
                raise Rollback
    except Rollback:
        pass
    print("done", i, flush=True)
print("all committed", flush=True)
threading.Event().wait()  # held until the test kills it: no relay runs here
"""

#: A relay that SIGKILLs itself once Redis accepted its Nth batch, before the batch's
#: delete commits: those rows are published and still in the table.
RELAY_KILLED_AFTER_PUBLISH = """
import os, signal, sys
import django
django.setup()
from blitzq_django import conf, outbox

batches = int(sys.argv[1])
client = conf.get_client()
publish = client.broker.enqueue
done = []

def enqueue(items):
    ids = publish(items)
    done.append(len(items))
    if len(done) >= batches:
        os.kill(os.getpid(), signal.SIGKILL)
    return ids

client.broker.enqueue = enqueue
outbox.Relay(lambda: client, batch=5).run_once()
"""


class Python(DjangoProcess):
    """``python -c <args[0]> <args[1:]>`` in the test project's environment."""

    def __post_init__(self) -> None:
        import subprocess

        from .harness import ROOT

        self._out = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([sys.executable, "-c", *self.args], cwd=ROOT,
                                        env=self.env, stdout=self._out,
                                        stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture
def fault_db(tmp_path: Path) -> Iterator[FaultDatabase]:
    with fault_database(tmp_path) as db:
        yield db


def stream_refs(broker: RedisBroker) -> Counter[str]:
    """The first argument of every message in the default queue's stream (one per entry)."""
    import redis

    plain = redis.Redis.from_url(broker.url)
    try:
        entries = plain.xrange(broker.keys.queue("default").stream, "-", "+")
    finally:
        plain.close()
    return Counter(decode(fields[b"m"]).args[0] for _id, fields in entries)


def committed_refs(db: FaultDatabase) -> set[str]:
    return {ref for (ref,) in db.rows("SELECT reference FROM shop_order")}


def outbox_rows(db: FaultDatabase) -> int:
    return int(db.rows("SELECT count(*) FROM blitzq_django_outboxmessage")[0][0])


def test_producer_and_relay_killed_every_committed_message_published_once(
        fault_redis: RedisServer, fault_db: FaultDatabase, tmp_path: Path) -> None:
    namespace = f"f{uuid.uuid4().hex[:10]}"
    broker = RedisBroker(fault_redis.url, namespace=namespace)
    env = {**base_env(fault_redis.url, namespace), **fault_db.env}
    n = 600
    procs: list[DjangoProcess] = []
    try:
        # 1. The producer commits durable messages (no relay in it) and dies mid-stream.
        source = Python([PRODUCER, str(n), "durable"], env, tmp_path / "producer.log")
        procs.append(source)
        source.wait_for("done 300")
        source.process.send_signal(signal.SIGKILL)
        source.process.wait(10)
        assert sum(stream_refs(broker).values()) == 0  # nothing published by it
        committed = committed_refs(fault_db)
        assert committed and not any(int(r[1:]) % 4 == 3 for r in committed)
        assert outbox_rows(fault_db) == len(committed)
        # 2. A relay dies after Redis accepted its third batch, before that batch's
        # delete committed: 15 published, 10 deleted, the other 5 published and still there.
        killed = Python([RELAY_KILLED_AFTER_PUBLISH, "3"], env, tmp_path / "relay-x.log")
        procs.append(killed)
        assert killed.process.wait(60) == -signal.SIGKILL, killed.text()
        assert sum(stream_refs(broker).values()) == 15
        assert outbox_rows(fault_db) == len(committed) - 10
        # 3. Two relays share the rows (re-publishing those 5); one is SIGKILLed while
        # publishing.
        relay_args = ["runoutbox", "--batch", "5", "--interval", "0.1"]
        first = DjangoProcess(relay_args, env, tmp_path / "relay0.log")
        second = DjangoProcess(relay_args, env, tmp_path / "relay1.log")
        procs += [first, second]
        wait_until(lambda: sum(stream_refs(broker).values()) >= len(committed) // 4, 30,
                   interval=0.01, message="the relays to publish a quarter")
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)
        wait_until(lambda: outbox_rows(fault_db) == 0, 60, interval=0.05,
                   message="the surviving relay to empty the outbox")
        assert second.stop() == 0  # SIGTERM: a graceful exit
        published = stream_refs(broker)
        lost = sorted(committed - set(published))
        duplicated = sum(c - 1 for c in published.values() if c > 1)
        rolled_back = sorted(set(published) - committed)
        line = (f"[fault] outbox producer+relays SIGKILL ({fault_db.vendor}): "
                f"committed={len(committed)} published={len(published)} lost={len(lost)} "
                f"duplicated={duplicated} rolled_back_published={len(rolled_back)}")
        print(line, flush=True)
        REPORTS.append(line)
        assert lost == [] and duplicated == 0 and rolled_back == []
    finally:
        for p in procs:
            p.stop(timeout=5)
        broker.close()


def test_redis_down_at_commit_the_messages_wait_in_the_outbox(
        fault_db: FaultDatabase, tmp_path: Path) -> None:
    """enqueue_on_commit (not durable) while Redis is down: each commit-time enqueue fails,
    the message goes to the outbox, and a relay publishes it once Redis is back."""
    server = RedisServer().start()
    namespace = f"f{uuid.uuid4().hex[:10]}"
    env = {**base_env(server.url, namespace), **fault_db.env}
    procs: list[DjangoProcess] = []
    broker = RedisBroker(server.url, namespace=namespace)
    try:
        server.kill()
        n = 20
        source = Python([PRODUCER, str(n), "on_commit"], env, tmp_path / "producer.log")
        procs.append(source)
        source.wait_for("all committed", timeout=60)
        committed = committed_refs(fault_db)
        assert len(committed) == n - n // 4
        assert outbox_rows(fault_db) == len(committed)
        assert source.text().count("kept in the outbox") == len(committed)
        server.start()
        relay = DjangoProcess(["runoutbox", "--once"], env, tmp_path / "relay.log")
        procs.append(relay)
        assert relay.process.wait(60) == 0, relay.text()
        published = stream_refs(broker)
        lost = sorted(committed - set(published))
        duplicated = sum(c - 1 for c in published.values() if c > 1)
        line = (f"[fault] outbox fallback, Redis down at commit ({fault_db.vendor}): "
                f"committed={len(committed)} lost={len(lost)} duplicated={duplicated}")
        print(line, flush=True)
        REPORTS.append(line)
        assert lost == [] and duplicated == 0 and set(published) == committed
        assert outbox_rows(fault_db) == 0
    finally:
        for p in procs:
            p.stop(timeout=5)
        broker.close()
        server.stop()
