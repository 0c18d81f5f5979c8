"""The Lua scripts of scripts/*.lua, loaded once, called by SHA."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str


def _load(name: str) -> Script:
    source = resources.files(__package__).joinpath("scripts", f"{name}.lua").read_text()
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())


ENQUEUE = _load("enqueue")
ENQUEUE_PLAIN = _load("enqueue_plain")
COMPLETE = _load("complete")
FETCH = _load("fetch")
RENEW = _load("renew")
RECOVER = _load("recover")
START = _load("start")
PROMOTE = _load("promote")
RETIRE = _load("retire")
PRUNE = _load("prune")
DEAD_LETTERS = _load("dead_letters")
HEARTBEAT = _load("heartbeat")
STATS = _load("stats")
PURGE = _load("purge")
CANCEL = _load("cancel")
RATE = _load("rate")
PERIODIC = _load("periodic")
EVENTS_READ = _load("events_read")
LEASE_HOLD = _load("lease_hold")
LEASE_RELEASE = _load("lease_release")
METRICS_ADD = _load("metrics_add")
UNWRITABLE = _load("unwritable")
WORKFLOW = _load("workflow")
