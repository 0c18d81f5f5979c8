"""Client.handle(id): a handle from a bare message id, its queue given or found from
what the broker keeps of the message (its record, or its place in a lane's schedule),
on both brokers."""

from __future__ import annotations

import pytest

from blitzq_django.engine import Client, ConfigurationError

from .helpers import arun_burst, run_burst


def test_a_given_queue_is_used_as_given(client: Client) -> None:
    handle = client.handle("a" * 32, queue="emails")
    assert (handle.id, handle.queue) == ("a" * 32, "emails")
    with pytest.raises(ConfigurationError, match="queue"):
        client.handle("a" * 32, queue="no spaces")
    with pytest.raises(ConfigurationError, match="message id: task_id must be"):
        client.handle("")


def test_a_finished_message_is_found_by_its_record(client: Client) -> None:
    @client.task(name="add", queue="reports")
    def add(x: int, y: int) -> int:
        return x + y

    @client.task(name="noop")
    def noop() -> None: ...

    message_id = add.enqueue(2, 3).id
    noop.enqueue()
    run_burst(client, queues=["default", "reports"])
    handle = client.handle(message_id)
    assert handle.queue == "reports"
    assert handle.result(timeout=1) == 5


@pytest.mark.parametrize("priority", [None, "high", "low"])
def test_a_scheduled_message_is_found_in_its_lane(client: Client,
                                                  priority: str | None) -> None:
    @client.task(name="later", queue="reports")
    def later() -> None: ...

    client.task(name="other")(lambda: None).enqueue()  # a second queue is seen
    message_id = later.options(delay=600, priority=priority).enqueue().id
    assert client.handle(message_id).queue == "reports"
    assert client.handle(message_id).cancel().outcome == "cancelled"


def test_a_message_found_nowhere(client: Client) -> None:
    @client.task(name="elsewhere", queue="reports")
    def elsewhere() -> None: ...

    # Nothing seen but the default queue: there it is.
    assert client.handle("b" * 32).queue == "default"
    elsewhere.enqueue()  # waiting, no record (TRACK_STATE off): the lookup cannot tell
    with pytest.raises(LookupError, match=r"on any of the 2 queues \(default, reports\)"):
        client.handle("b" * 32)


@pytest.mark.asyncio
async def test_the_async_twin_finds_the_same_queue(client: Client) -> None:
    @client.task(name="async_add", queue="reports")
    async def add(x: int, y: int) -> int:
        return x + y

    message_id = (await add.aenqueue(1, 2)).id
    await arun_burst(client, queues=["reports"])
    handle = await client.ahandle(message_id)
    assert handle.queue == "reports"
    assert await handle.aresult(timeout=1) == 3
