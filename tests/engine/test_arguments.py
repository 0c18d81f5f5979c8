"""Arguments are bound to the task's signature at enqueue (engine/core/binding.py): a call
that could not bind raises TypeError there, naming the task, as calling it would; nothing
is written. Calls that would bind are never refused."""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any

import pytest

from blitzq_django.engine import Client, MemoryBroker, RedisBroker
from blitzq_django.engine.core.binding import Arguments
from blitzq_django.engine.core.task import TaskSpec


def make_client(broker: Any) -> Client:
    client = Client(broker)

    @client.task(name="mail.newsletter")
    def send_newsletter(issue: int, *, dry_run: bool = False) -> None:
        return None

    @client.task(name="mail.anewsletter")
    async def asend_newsletter(issue: int, *, dry_run: bool = False) -> None:
        return None

    return client


BAD_CALLS = [
    ((1, 2, 3), {}, "send_newsletter() takes 1 positional argument but 3 were given"),
    ((), {"isue": 1}, "send_newsletter() got an unexpected keyword argument 'isue'"),
    ((), {}, "send_newsletter() missing 1 required positional argument: 'issue'"),
    ((1,), {"issue": 2}, "send_newsletter() got multiple values for argument 'issue'"),
    ((1, True), {}, "send_newsletter() takes 1 positional argument but 2 were given"),
]


@pytest.mark.parametrize("kind", ["def", "async def"])
@pytest.mark.parametrize(("args", "kwargs", "said"), BAD_CALLS)
def test_a_call_that_would_not_bind_is_refused_at_enqueue(
        broker: RedisBroker | MemoryBroker, kind: str, args: tuple[Any, ...],
        kwargs: dict[str, Any], said: str) -> None:
    client = make_client(broker)
    name = "mail.newsletter" if kind == "def" else "mail.anewsletter"
    spec = client.registry.get(name)
    said = said if kind == "def" else said.replace("send_newsletter", "asend_newsletter")
    expected = f"{said} (task '{name}': its arguments are checked at enqueue)"
    with pytest.raises(TypeError) as raised:
        client.enqueue(spec, args, kwargs)
    assert str(raised.value).endswith(expected)
    assert "make_client.<locals>." in str(raised.value)  # the function, as Python names it
    with pytest.raises(TypeError, match="its arguments are checked at enqueue"):
        client.enqueue_many(spec, [((1,), {}), (args, kwargs)])  # one bad call: none written

    async def from_async() -> None:
        with pytest.raises(TypeError, match="its arguments are checked at enqueue"):
            await client.aenqueue(spec, args, kwargs)
        with pytest.raises(TypeError, match="its arguments are checked at enqueue"):
            await client.aenqueue_many(spec, [(args, kwargs)])
        await broker.aclose()

    asyncio.run(from_async())
    assert client.queue_stats().ready == 0


def test_the_task_objects_raise_as_calling_the_function_would(
        broker: RedisBroker | MemoryBroker) -> None:
    client = Client(broker)

    @client.task(name="mail.newsletter")
    def send_newsletter(issue: int) -> None:
        return None

    for call in (lambda: send_newsletter(1, 2, 3), lambda: send_newsletter.enqueue(1, 2, 3),
                 lambda: send_newsletter.enqueue_many([(1, 2, 3)])):
        with pytest.raises(TypeError, match=r"send_newsletter\(\) takes 1 positional "
                                            r"argument but 3 were given"):
            call()
    with pytest.raises(TypeError, match="unexpected keyword argument 'isue'"):
        send_newsletter.enqueue(isue=1)
    assert client.queue_stats().ready == 0
    send_newsletter.enqueue(1)
    send_newsletter.enqueue(issue=2)
    send_newsletter.enqueue_many([(3,), ((), {"issue": 4})])
    assert client.queue_stats().ready == 4


def plain(a: int, b: int = 2, /, c: int = 3, *rest: int, d: int, e: int = 5,
          **more: Any) -> None:
    return None


def wrapping(func: Any) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


@wrapping
def wrapped(x: int, y: int) -> None:
    return None


class Handler:
    def __call__(self, event: str) -> None:
        return None

    def method(self, x: int) -> None:
        return None


def anything(*args: Any, **kwargs: Any) -> None:
    return None


@pytest.mark.parametrize(("func", "good", "bad"), [
    (plain, [((1,), {"d": 4}), ((1, 2, 3, 4, 5), {"d": 4, "z": 0}), ((1,), {"c": 3, "d": 4})],
     [((1,), {}), ((), {"a": 1, "d": 4}), ((1, 2, 3), {"c": 3, "d": 4})]),
    (wrapped, [((1, 2), {}), ((1,), {"y": 2})], [((1,), {}), ((1, 2, 3), {})]),
    (Handler(), [(("e",), {}), ((), {"event": "e"})], [((), {}), (("e", "f"), {})]),
    (Handler().method, [((1,), {})], [((1, 2), {})]),
    (len, [(([],), {})], [(([], []), {})]),
])
def test_every_kind_of_callable_binds_as_calling_it_would(
        func: Any, good: list[Any], bad: list[Any]) -> None:
    arguments = Arguments.of(func)
    assert arguments is not None
    for args, kwargs in good:
        arguments.check(args, kwargs)
        inspect.signature(func).bind(*args, **kwargs)  # what Python itself says
    for args, kwargs in bad:
        with pytest.raises(TypeError):
            arguments.check(args, kwargs)
        with pytest.raises(TypeError):
            inspect.signature(func).bind(*args, **kwargs)


def test_a_function_that_takes_anything_is_not_checked() -> None:
    assert Arguments.of(anything) is None
    assert TaskSpec.build(anything, name="any").arguments is None


def test_a_signature_given_replaces_the_functions_own() -> None:
    # A registered runner that passes something of its own first (the django.tasks
    # context): enqueue binds to the parameters the caller provides.
    def runner(context: Any, order: int) -> None:
        return None

    own = inspect.signature(runner)
    spec = TaskSpec.build(runner, name="r", signature=own.replace(
        parameters=list(own.parameters.values())[1:]))
    spec.arguments.check((1,), {})  # type: ignore[union-attr]
    with pytest.raises(TypeError, match=r"runner\(\) takes 1 positional argument"):
        spec.arguments.check((None, 1), {})  # type: ignore[union-attr]
