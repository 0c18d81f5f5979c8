"""Django's own tests of its task backends, run against the BlitzQ backend.

The test files of Django's ``tests/tasks`` (at a pinned version: django_contract.py
fetches and adapts them) test the ``django.tasks`` API on Django's DummyBackend (results
stay READY) and ImmediateBackend (the task has run when ``enqueue()`` returns). Here
both are the BlitzQ backend on a real Redis: as is for the dummy one, with a real worker
running each task to its end before ``enqueue()`` returns for the immediate one
(contract_backends.py). Each upstream test is reported on its own (pytest's id is the
upstream class and test name). Where the semantics differ, the test is expected to
fail, strictly (a difference that goes away fails the run until it is removed from
DIFFERENCES), with its reason; docs/django.md ("Django's contract tests") lists them.

Runs on Django 6 (``django.tasks``) and on Django 5.2 with the django-tasks backport
(the same tests under the backport's names). Skipped only when the tests cannot be
downloaded for want of a network, with pip's reason.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

try:
    import blitzq_django.backend  # noqa: F401
except ImproperlyConfigured:  # neither Django 6 nor the django-tasks backport
    pytest.skip("needs django.tasks: Django 6, or the django-tasks backport",
                allow_module_level=True)

from blitzq_django import conf  # noqa: E402
from blitzq_django.backend import TaskResultDoesNotExist  # noqa: E402

from . import django_contract  # noqa: E402

try:
    import django.tasks  # noqa: F401
except ImportError:
    BACKPORT = True
else:
    BACKPORT = False

try:
    _ROOT = django_contract.adapted_tests(backport=BACKPORT)
except django_contract.Unavailable as exc:
    pytest.skip(str(exc), allow_module_level=True)
sys.path.insert(0, str(_ROOT))
from tasks import test_dummy_backend, test_immediate_backend, test_tasks  # noqa: E402

# Why an upstream test is expected to fail here (docs/django.md, "Django's contract
# tests", says the same), and the exception it then fails with (another one is a failure).
CLASS_IDENTITY = ("asserts the backend is an instance of Django's DummyBackend or "
                  "ImmediateBackend class (docs/django.md: contract tests)", AssertionError)
DUMMY_RESULTS = ("reads or changes DummyBackend.results, the in-memory list of that "
                 "backend (docs/django.md: contract tests)", AttributeError)
DUMMY_CLEAR = ("DummyBackend.clear() forgets every result; BlitzQ keeps a result for "
               "RESULT_TTL (docs/django.md: contract tests)", AssertionError)
NO_CALLER = ("a KeyboardInterrupt raised by a task fails that task on the worker: there "
             "is no caller to interrupt (docs/django.md: contract tests)", AssertionError)
GETS_RESULTS = ("ImmediateBackend cannot get or refresh a result; BlitzQ can "
                "(supports_get_result; docs/django.md: contract tests)",
                (AssertionError, TaskResultDoesNotExist))
DEFERS = ("ImmediateBackend refuses run_after; BlitzQ schedules the task "
          "(supports_defer; docs/django.md: contract tests)", AssertionError)
BACKPORT_API = ("the django-tasks backport (0.12) differs from Django 6.1 here, with its "
                "own backends too: no pickling of Task, other messages "
                "(docs/django.md: contract tests)", Exception)

Raised = type[BaseException] | tuple[type[BaseException], ...]
DIFFERENCES: dict[tuple[Any, str], dict[str, tuple[str, Raised]]] = {
    (test_tasks, "TaskTestCase"): {
        "test_using_correct_backend": CLASS_IDENTITY,
        "test_get_backend": CLASS_IDENTITY,
        "test_enqueue_task": DUMMY_RESULTS,
        "test_enqueue_task_async": DUMMY_RESULTS,
        **({"test_pickle_task": BACKPORT_API, "test_pickle_task_result": BACKPORT_API,
            "test_unpickle_arbitrary_string": BACKPORT_API,
            "test_unpickle_non_task_object": BACKPORT_API,
            "test_run_after_in_decorator": BACKPORT_API} if BACKPORT else {}),
    },
    (test_dummy_backend, "DummyBackendTestCase"): {
        "test_using_correct_backend": CLASS_IDENTITY,
        "test_enqueue_task": DUMMY_RESULTS,
        "test_enqueue_task_async": DUMMY_RESULTS,
        "test_refresh_result": DUMMY_RESULTS,
        "test_refresh_result_async": DUMMY_RESULTS,
        "test_clear": DUMMY_CLEAR,
        **({"test_validate_disallowed_async_task": BACKPORT_API} if BACKPORT else {}),
    },
    (test_dummy_backend, "DummyBackendTransactionTestCase"): {
        "test_doesnt_wait_until_transaction_commit_by_default": DUMMY_RESULTS,
    },
    (test_immediate_backend, "ImmediateBackendTestCase"): {
        "test_using_correct_backend": CLASS_IDENTITY,
        "test_throws_keyboard_interrupt": NO_CALLER,
        "test_cannot_get_result": GETS_RESULTS,
        "test_cannot_refresh_result": GETS_RESULTS,
        "test_cannot_pass_run_after": DEFERS,
    },
    (test_immediate_backend, "ImmediateBackendTransactionTestCase"): {},
}


@pytest.fixture(autouse=True)
def _on_redis(blitzq_redis: Any) -> Iterator[None]:
    """Every upstream test on the test's Redis namespace (BLITZQ settings)."""
    yield


def _adapt_test(test: Callable[..., Any], expected_to_fail: bool) -> Callable[..., Any]:
    """``test`` as run here. An ``async def`` test closes the Redis connections of its
    event loop at the end (Django runs each on a loop of its own, gone afterwards). One
    expected to fail runs its subTest()s as plain blocks: a failure in one fails the test
    itself, which is what its xfail mark expects (pytest reports a failed subtest apart,
    and the test itself as passed)."""
    if inspect.iscoroutinefunction(test):
        async def run_async(self: Any) -> None:
            if expected_to_fail:
                self.subTest = _no_subtest
            try:
                await test(self)
            finally:
                await conf.get_client().broker.aclose()

        wrapped: Callable[..., Any] = run_async
    else:
        def run(self: Any) -> None:
            if expected_to_fail:
                self.subTest = _no_subtest
            test(self)

        wrapped = run
    return functools.wraps(test)(wrapped)


def _no_subtest(*args: Any, **kwargs: Any) -> contextlib.nullcontext[None]:
    return contextlib.nullcontext()


def _adapted(module: Any, name: str,
             differences: dict[str, tuple[str, Raised]]) -> type:
    upstream = getattr(module, name)
    body: dict[str, Any] = {"__module__": __name__, "__qualname__": name,
                            "__doc__": f"Django {django_contract.DJANGO_VERSION}'s "
                                       f"tests/tasks/{module.__name__.split('.')[-1]}.py"
                                       f"::{name}, on the BlitzQ backend."}
    unknown = [test for test in differences if not callable(getattr(upstream, test, None))]
    if unknown:
        raise RuntimeError(f"{name}.{', '.join(unknown)}: no longer upstream, update "
                           "DIFFERENCES")
    for test in dir(upstream):
        if not test.startswith("test"):
            continue
        function = getattr(upstream, test)
        if test in differences:
            reason, raises = differences[test]
            body[test] = pytest.mark.xfail(reason=reason, raises=raises, strict=True)(
                _adapt_test(function, expected_to_fail=True))
        elif inspect.iscoroutinefunction(function):
            body[test] = _adapt_test(function, expected_to_fail=False)
    return type(name, (upstream,), body)


for (_module, _name), _differences in DIFFERENCES.items():
    globals()[_name] = _adapted(_module, _name, _differences)
