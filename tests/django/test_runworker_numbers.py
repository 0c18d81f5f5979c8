"""manage.py runworker refuses bad numbers, naming the flag (the engine's argparse types)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError


@pytest.mark.parametrize(("flag", "value"), [
    ("--visibility-timeout", "nan"), ("--shutdown-timeout", "inf"), ("--threads", "-1"),
    ("--concurrency", "1e3"), ("--processes", "0"), ("--max-memory-per-child", "-1"),
])
def test_a_bad_flag_is_a_command_error_naming_it(flag: str, value: str) -> None:
    with pytest.raises(CommandError, match=f"argument {flag}(/-[a-z])?: must be"):
        call_command("runworker", "--burst", flag, value)


# Django 6.1's system checks query the database (JSONField support on SQLite).
@pytest.mark.django_db
@pytest.mark.parametrize(("options", "named"), [
    ({"threads": -1}, "threads"), ({"visibility_timeout": float("nan")}, "visibility_timeout"),
    ({"processes": 0}, "--processes"),
])
def test_options_given_as_keywords_are_checked_too(blitzq_memory: Any, options: dict[str, Any],
                                                   named: str) -> None:
    # call_command(..., threads=-1) bypasses the argparse types.
    with pytest.raises(CommandError, match=named):
        call_command("runworker", burst=True, **options)
