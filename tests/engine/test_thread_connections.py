"""A lone command goes out on a connection its thread keeps (brokers/redis/store.py SyncStore):
one per thread, given back to the pool when the thread ends, and never shared with a
forked child."""

from __future__ import annotations

import gc
import os
import threading

import pytest

from blitzq_django.engine import Client, RedisBroker
from blitzq_django.engine.brokers.redis.ops import Op


def _address(broker: RedisBroker) -> str:
    info = broker.sync.run(Op(command=("CLIENT", "INFO")))
    text = info.decode() if isinstance(info, bytes) else info
    return next(f.split("=", 1)[1] for f in text.split() if f.startswith("addr="))


@pytest.fixture
def broker(redis_url: str, namespace: str) -> RedisBroker:
    broker = RedisBroker(redis_url, namespace=namespace)
    yield broker
    broker.close()


@pytest.mark.single_node("looks into one redis.Redis pool; a cluster client has one a node")
def test_each_thread_keeps_one_connection_and_gives_it_back(broker: RedisBroker) -> None:
    pool = broker.sync.client.connection_pool
    mine = _address(broker)
    assert _address(broker) == mine  # kept, not taken from the pool again
    seen: list[str] = []

    def other() -> None:
        seen.append(_address(broker))
        seen.append(_address(broker))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen[0] == seen[1] != mine
    del thread
    gc.collect()
    # The ended thread's connection is back in the pool, ready for the next user.
    idle = {f"{c._sock.getsockname()[0]}:{c._sock.getsockname()[1]}"
            for c in pool._available_connections if c._sock is not None}
    assert seen[0] in idle


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_use_its_parents_connection(broker: RedisBroker) -> None:
    client = Client(broker)

    @client.task(name="t")
    def t(x: int) -> None:
        return None

    parent = _address(broker)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: enqueue on a connection of its own, report, exit
        code = 1
        try:
            t.enqueue(1)
            os.write(write, _address(broker).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child and child != parent
    # The parent's connection was not shut down or read from by the child.
    assert _address(broker) == parent
    t.enqueue(2)
    assert broker.queue_stats("default")["ready"] == 2
