"""What users' code gets from the public API, as types (checked by mypy, scripts/test.py).

Each ``assert_type`` states the type a type checker infers for what the docs teach, and
each ``# type: ignore[code]`` a call that must stay refused (unused ignores are errors
here): mypy fails when either changes. Under pytest the functions are only defined,
never run: the file imports cleanly and holds no test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, assert_type

if TYPE_CHECKING:
    from blitzq_django import TaskHandle, blitzq_task, enqueue_on_commit, get_client
    from blitzq_django.engine import Client, Record
    from blitzq_django.periodic import periodic
    from blitzq_django.tasks.decorators import BlitzqTask


def decorated_tasks_keep_their_types() -> None:
    @blitzq_task
    def add(x: int, y: int = 0) -> int:
        return x + y

    @blitzq_task(queue="emails", retries=3)
    def send_welcome(user_id: int, *, template: str = "welcome") -> None: ...

    @periodic(every=60)
    def count_orders() -> int:
        return 0

    assert_type(add.spec.name, str)
    as_declared: BlitzqTask[[int, int], int] = add  # its parameters, as a ParamSpec spells them
    assert_type(as_declared.enqueue(1, 2), TaskHandle[int])
    assert_type(add(1, 2), int)
    assert_type(send_welcome(1), None)
    assert_type(count_orders.enqueue(), TaskHandle[int])
    count_orders.enqueue(1)  # type: ignore[call-arg]


def enqueue_keeps_parameter_and_return_types() -> None:
    @blitzq_task
    def add(x: int, y: int = 0) -> int:
        return x + y

    handle = add.enqueue(1, y=2)
    assert_type(handle, TaskHandle[int])
    assert_type(handle.result(timeout=5), int)
    assert_type(handle.record(), Record)
    assert_type(add.enqueue_on_commit(1), TaskHandle[int])
    assert_type(add.enqueue_many([(1,), ((1,), {"y": 2})]), list[TaskHandle[int]])

    add.enqueue("one")  # type: ignore[arg-type]
    add.enqueue(1, z=2)  # type: ignore[call-arg]


def options_keep_them_too() -> None:
    @blitzq_task
    def add(x: int, y: int = 0) -> int:
        return x + y

    later = add.options(delay=60, queue="low")
    still: BlitzqTask[[int, int], int] = later
    assert_type(still.enqueue(1, 2), TaskHandle[int])
    assert_type(later.enqueue(1), TaskHandle[int])
    assert_type(add.options(using="default").enqueue_on_commit(1).result(), int)

    add.options(delay=60).enqueue("one")  # type: ignore[arg-type]


async def async_twins() -> None:
    @blitzq_task
    async def fetch(url: str) -> bytes:
        return b""

    handle = await fetch.aenqueue("https://example.com")
    assert_type(handle, TaskHandle[bytes])
    assert_type(await handle.aresult(), bytes)
    assert_type(await fetch.options(delay=1).aenqueue("x"), TaskHandle[bytes])


def the_functions() -> None:
    @blitzq_task
    def ship(order_id: int) -> str:
        return "shipped"

    assert_type(get_client(), Client)
    assert_type(enqueue_on_commit(ship, (1,)), TaskHandle[str])
    assert_type(get_client().get_result("id"), Record)


def handles_built_without_a_task_hold_any() -> None:
    handle: TaskHandle[Any] = get_client().enqueue(get_client().registry.get("shop.tasks.x"))
    assert_type(handle.result(), Any)


def test_this_file_is_checked_by_mypy() -> None:
    """pytest only imports this file; scripts/test.py runs mypy over it."""
    assert callable(decorated_tasks_keep_their_types)


def celery_style_calls() -> None:
    @blitzq_task
    def add(x: int, y: int = 0) -> int:
        return x + y

    assert_type(add.delay(1, 2), TaskHandle[int])
    assert_type(add.apply_async((1, 2), countdown=5), TaskHandle[int])
    assert_type(add.handle("0" * 32).result(), int)
    add.delay("one")  # type: ignore[arg-type]
