"""engine.core.redact: secrets in task arguments are masked for display, never in place."""

from __future__ import annotations

import copy
from typing import Any

from blitzq_django.engine.core.redact import (
    DEFAULT_REDACT,
    MASK,
    is_secret,
    positional_names,
    redact,
)


def login(user: str, password: str, /, retries: int = 1, *rest: Any, token: str = "",
          **extra: Any) -> None: ...


def test_keyword_arguments_are_masked_by_name_case_insensitively_and_as_substrings() -> None:
    args, kwargs = redact((), {"Password": "pw", "db_password": "pw2", "apiKey": "k",
                               "user": "bob", "count": 3}, DEFAULT_REDACT)
    assert kwargs == {"Password": MASK, "db_password": MASK, "apiKey": MASK, "user": "bob",
                      "count": 3}
    assert args == ()


def test_positional_arguments_are_masked_by_the_task_parameter_names() -> None:
    params = positional_names(login)
    assert params == ("user", "password", "retries")  # *rest has no names
    args, _ = redact(["bob", "hunter2", 2, "after-star-args"], {}, DEFAULT_REDACT, params)
    assert args == ["bob", MASK, 2, "after-star-args"]


def test_without_parameter_names_only_nested_dict_keys_are_masked() -> None:
    args, _ = redact(("hunter2", {"secret": "s", "ok": 1}), {}, DEFAULT_REDACT)
    assert args == ("hunter2", {"secret": MASK, "ok": 1})


def test_nested_dicts_and_lists_are_masked_recursively_without_mutating_the_input() -> None:
    kwargs = {"payload": {"users": [{"name": "a", "auth": {"access_token": "t"}}],
                          "headers": {"Authorization": "Bearer x", "Accept": "json"}}}
    before = copy.deepcopy(kwargs)
    _, shown = redact([], kwargs, DEFAULT_REDACT)
    assert shown == {"payload": {"users": [{"name": "a", "auth": {"access_token": MASK}}],
                                 "headers": {"Authorization": MASK, "Accept": "json"}}}
    assert kwargs == before


def test_custom_names_replace_the_defaults() -> None:
    _, shown = redact([], {"iban": "DE00", "password": "pw"}, ["IBAN"])
    assert shown == {"iban": MASK, "password": "pw"}


def test_odd_keys_and_uninspectable_callables_are_handled() -> None:
    assert not is_secret(3, DEFAULT_REDACT)
    assert not is_secret("anything", [])

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, secret: str) -> None: ...

    assert positional_names(Unhashable()) == ("secret",)
    assert positional_names(vars) == ()  # no signature to read
    _, shown = redact([], {"x": {1: "one", None: "n"}}, DEFAULT_REDACT)
    assert shown == {"x": {1: "one", None: "n"}}
