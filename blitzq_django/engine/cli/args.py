"""Argument types shared by the command lines (the worker's and the ops commands')."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..core import limits


def number(name: str) -> Callable[[str], int | float]:
    """An argparse type checking a flag by the rule of the same name (core.limits).

    argparse reports the ArgumentTypeError as "argument --flag: must be ...".
    """
    rule = limits.LIMITS[name]

    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if rule.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {rule.describe()}, not {text!r}") from None
        found = limits.problem(name, value)
        if found:
            raise argparse.ArgumentTypeError(found)
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse
