"""TaskSpec (a registered callable and its options) and TaskRegistry (name -> spec)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError, TaskNotRegistered
from .binding import Arguments
from .names import check_name
from .rates import Rate, as_rate, check_rate_key
from .retry import RetryPolicy
from .validate import check, check_expires, priority_lane

DEFAULT_QUEUE = "default"
#: Positional counts of a ``*args`` function listed in TaskSpec.arities (more are checked
#: the slower way).
ARITIES = 32
EXECUTORS = ("thread", "process")


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSpec:
    name: str
    func: Callable[..., Any]
    queue: str = DEFAULT_QUEUE
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: float | None = None  # seconds per attempt
    store_result: bool | None = None  # None = the client's store_results
    dead_letter: bool = True  # False: a final failure is recorded as failed instead
    is_async: bool = False
    on_failure: Callable[[Any], Any] | None = None  # called with the Record of each failed attempt
    on_dead_letter: Callable[[Any], Any] | None = None  # called with the DeadLetter
    # Rate limits (core/rates.py, docs/rate-limits.md): runs per unit across all workers,
    # in a bucket named by rate_key (a name, or a callable of the task's arguments
    # returning one; its rate from the client's rate_limits unless rate_limit is given),
    # else by the task's name.
    rate_limit: Rate | None = None
    rate_key: str | Callable[..., str] | None = None
    # Default per-call options (each call may override them):
    expires: Any = None  # seconds, timedelta or aware datetime: not started by then, dropped
    priority: str | None = None  # lane: "high" or "low"; None is normal
    unique: bool = False  # while one message of these arguments is unfinished, no second one
    # Where a `def` task runs: "thread" (the worker's thread pool) or "process" (a pool of
    # child processes, engine/worker/processes.py, for CPU-bound code). async tasks run on
    # the loop whatever it says.
    executor: str = "thread"
    #: What enqueue binds a call's arguments to (core/binding.py): None, the function's
    #: own signature (following ``__wrapped__``). Give another where the function
    #: registered wraps the real one and changes its parameters.
    signature: inspect.Signature | None = field(default=None, compare=False, repr=False)
    #: The check of those arguments, worked out once here; None: any arguments bind.
    arguments: Arguments | None = field(default=None, init=False, compare=False, repr=False)
    #: Counts of positional arguments that bind without a keyword: a call of one of them
    #: and no keyword needs no other check. Enqueue tests just this (a frozenset: the
    #: cheapest test, bench/enqueue_cost.py); anything else goes to ``arguments``.
    arities: frozenset[int] = field(default=frozenset(), init=False, compare=False,
                                    repr=False)

    def __post_init__(self) -> None:
        arguments = Arguments.of(self.func, self.signature)
        object.__setattr__(self, "arguments", arguments)
        low, high = (0, ARITIES) if arguments is None else (arguments.low, arguments.high)
        object.__setattr__(self, "arities", frozenset(range(low, min(high, low + ARITIES) + 1)))

    @classmethod
    def build(cls, func: Callable[..., Any], **options: Any) -> TaskSpec:
        name = options.pop("name", None) or f"{func.__module__}.{func.__qualname__}"
        retry = options.pop("retry", None) or RetryPolicy()
        retry_fields: dict[str, Any] = {
            k: options.pop(k)
            for k in ("retries", "initial_delay", "max_delay", "factor", "jitter",
                      "retry_on", "dont_retry_on")
            if k in options
        }
        if retry_fields:
            for k in ("retry_on", "dont_retry_on"):
                value = retry_fields.get(k)
                if isinstance(value, type):  # a single exception class
                    retry_fields[k] = (value,)
                elif value is not None and not isinstance(value, tuple):
                    retry_fields[k] = tuple(value)
            try:
                retry = RetryPolicy(**{**_policy_fields(retry), **retry_fields})
            except ConfigurationError as exc:
                raise ConfigurationError(f"task {name!r}: {exc}") from None
        timeout = options.get("timeout")
        if timeout is not None:
            check("timeout", timeout, f"task {name!r}: ")
        if options.get("priority") is not None:
            options["priority"] = priority_lane(options["priority"], f"task {name!r}: ")
        if options.get("expires") is not None:
            check_expires(options["expires"], f"task {name!r}: ")
        if not isinstance(options.get("unique", False), bool):
            raise ConfigurationError(f"task {name!r}: unique must be True or False, got "
                                     f"{options['unique']!r}")
        if "queue" in options:
            try:
                check_name("queue", options["queue"])
            except ConfigurationError as exc:
                raise ConfigurationError(f"task {name!r}: {exc}") from None
        if options.get("rate_limit") is not None:
            options["rate_limit"] = as_rate(options["rate_limit"], f"task {name!r}: rate_limit")
        if options.get("rate_key") is not None:
            check_rate_key(options["rate_key"], f"task {name!r}: rate_key")
        executor = options.get("executor", "thread")
        if executor not in EXECUTORS:
            raise ConfigurationError(f"task {name!r}: executor must be one of "
                                     f"{', '.join(map(repr, EXECUTORS))}, not {executor!r:.40}")
        if executor == "process":
            check_process_function(func, f"task {name!r}: ")
        return cls(
            name=name,
            func=func,
            retry=retry,
            is_async=inspect.iscoroutinefunction(func),
            **options,
        )


def check_process_function(func: Callable[..., Any], where: str = "") -> None:
    """Refuse what a child process cannot import by name: executor="process" runs only
    plain `def` functions defined at the top level of a module."""
    qualname = getattr(func, "__qualname__", None)
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        problem = "is an async def function (async tasks run on the worker's event loop)"
    elif not inspect.isfunction(func):
        problem = f"is a {type(func).__name__}, not a plain function"
    elif func.__name__ == "<lambda>":
        problem = "is a lambda"
    elif not qualname or "<locals>" in qualname or func.__closure__:
        problem = "is defined inside a function (a closure)"
    elif "." in qualname or not getattr(func, "__module__", None):
        problem = "is not defined at the top level of a module"
    else:
        return
    raise ConfigurationError(f"{where}executor='process' needs a `def` function defined at "
                             f"the top level of an importable module (a child process "
                             f"imports it by name); {qualname or func!r} {problem}")


def _policy_fields(policy: RetryPolicy) -> dict[str, Any]:
    return {f: getattr(policy, f) for f in RetryPolicy.__dataclass_fields__}


def _qualname(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', repr(func))}"


class TaskRegistry:
    """Task name -> TaskSpec. A worker runs only what its registry knows."""

    def __init__(self) -> None:
        self._specs: dict[str, TaskSpec] = {}

    def add(self, spec: TaskSpec) -> TaskSpec:
        existing = self._specs.get(spec.name)
        # Re-registration by a module reload (autoreload, tests) replaces the old one;
        # two different functions under one name is a mistake.
        if existing is not None and _qualname(existing.func) != _qualname(spec.func):
            raise ConfigurationError(f"task name {spec.name!r} is registered twice")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> TaskSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise TaskNotRegistered(f"unknown task {name!r}") from None

    def find(self, name: str) -> TaskSpec | None:
        return self._specs.get(name)

    def queues(self) -> set[str]:
        return {spec.queue for spec in self._specs.values()}

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)
