"""Failure: how a command says it did not do what was asked (its message and exit code).

Its own module so that the commands kept apart from ops.py (health.py) raise it too.
"""

from __future__ import annotations


class Failure(Exception):
    """A command that did not do what was asked: its message and exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
