"""Arguments bound to a task's signature at enqueue: a call that could not bind raises
TypeError there, as calling the function would, instead of failing on a worker.

``Arguments.of(func)`` reads the signature once (at registration). Checking a call is
then one comparison when it passes positional arguments only, within the count the
function takes (the usual call); any other call runs a stub function of the same
parameters, so CPython itself binds them and words the error (``send() takes 1
positional argument but 3 were given``, ``send() got an unexpected keyword argument
'isue'``). A function that takes anything (``(*args, **kwargs)``), or whose signature
cannot be read (some builtins), is not checked.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

_P = inspect.Parameter


class Arguments:
    """How to check the arguments of one signature."""

    __slots__ = ("low", "high", "stub")

    def __init__(self, low: int, high: int, stub: Callable[..., None]) -> None:
        #: positional-only calls with low..high arguments bind without the stub
        self.low = low
        self.high = high
        self.stub = stub

    @classmethod
    def of(cls, func: Callable[..., Any],
           signature: inspect.Signature | None = None) -> Arguments | None:
        """The check of ``signature`` (default: ``func``'s, following ``__wrapped__``),
        or None when there is nothing to check."""
        if signature is None:
            try:
                signature = inspect.signature(func)
            except (TypeError, ValueError):  # no signature to read: not checked
                return None
        params = list(signature.parameters.values())
        if [p.kind for p in params] == [_P.VAR_POSITIONAL, _P.VAR_KEYWORD]:
            return None  # takes anything
        positional = [p for p in params if p.kind in (_P.POSITIONAL_ONLY,
                                                        _P.POSITIONAL_OR_KEYWORD)]
        required = [p for p in positional if p.default is _P.empty]
        high = (sys.maxsize if any(p.kind is _P.VAR_POSITIONAL for p in params)
                else len(positional))
        if any(p.kind is _P.KEYWORD_ONLY and p.default is _P.empty for p in params):
            low, high = 1, 0  # a keyword is required: every call goes to the stub
        else:
            low = len(required)
        return cls(low, high, _stub(params, func))

    def check(self, args: Any, kwargs: dict[str, Any]) -> None:
        """Raise TypeError if ``func(*args, **kwargs)`` would not bind."""
        if kwargs or not self.low <= len(args) <= self.high:
            self.stub(*args, **kwargs)


def _stub(params: list[inspect.Parameter], func: Callable[..., Any]) -> Callable[..., None]:
    """A function of these parameters that does nothing, named as ``func`` (CPython's
    binding errors name the function)."""
    text: list[str] = []
    star = False
    for n, p in enumerate(params):
        if p.kind is _P.KEYWORD_ONLY and not star:
            text.append("*")
            star = True
        if p.kind is _P.VAR_POSITIONAL:
            text.append(f"*{p.name}")
            star = True
        elif p.kind is _P.VAR_KEYWORD:
            text.append(f"**{p.name}")
        else:
            text.append(p.name if p.default is _P.empty else f"{p.name}=None")
        last_positional_only = p.kind is _P.POSITIONAL_ONLY and (
            n + 1 == len(params) or params[n + 1].kind is not _P.POSITIONAL_ONLY)
        if last_positional_only:
            text.append("/")
    namespace: dict[str, Any] = {}
    exec(f"def stub({', '.join(text)}):\n    pass\n", namespace)  # noqa: S102 - names only
    stub: Callable[..., None] = namespace["stub"]
    name = getattr(func, "__name__", None) or type(func).__name__
    stub.__name__ = name
    stub.__qualname__ = getattr(func, "__qualname__", None) or name
    return stub
