"""blitzq's engine Worker, ``async def`` tasks, with the broker in fast mode
(``RedisBroker(mode="fast")``: lists, no lease, at-most-once; BLITZQ["MODE"] in Django).

A tree whose RedisBroker takes no ``mode=`` (or ``modes=``) argument makes importing this
adapter raise, and bench/run.py skips the system with that message. Alone:

    python3 bench/run.py --only blitzq,blitzq-fast --workloads dispatch_off,dispatch_on,latency
"""

from __future__ import annotations

import inspect

from blitzq_django.engine import RedisBroker

from .blitzq import ASYNC, BULK_NOTE, CONC, VERSION, make

__all__ = ["ASYNC", "BULK_NOTE", "CONC", "VERSION"]
_params = inspect.signature(RedisBroker.__init__).parameters
if "modes" in _params:
    _kwargs: dict = {"modes": ("fast",)}
elif "mode" in _params:
    _kwargs = {"mode": "fast"}
else:
    raise ImportError("blitzq fast mode: RedisBroker takes no mode=/modes= argument in this "
                      "tree yet (hook in bench/systems/blitzq_fast.py)")
globals().update(make("async", _kwargs, note=f", RedisBroker({_kwargs})",
                      guarantee="at-most-once (fast mode: lists, no lease)"))
