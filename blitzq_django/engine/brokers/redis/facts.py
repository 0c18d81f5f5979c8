"""What the deploy checks read of the Redis server (capabilities.ServerFacts): INFO
server + memory, and the maxmemory-policy from CONFIG GET, else from INFO memory
(managed services often refuse CONFIG)."""

from __future__ import annotations

from typing import Any

from ...errors import BrokerError
from .ops import Op


def _refused(exc: BrokerError) -> str:
    return str(exc.__cause__ or exc)  # the server's words, not the URL again


def server_facts(run: Any) -> tuple[dict[str, Any], str | None, str]:
    """(INFO server + memory, maxmemory-policy or None, why it is None) through ``run``
    (a SyncStore's): each read may be refused on its own."""
    info: dict[str, Any] = {}
    why = ""
    for section in ("server", "memory"):
        try:
            info.update(run(Op(command=("INFO", section))))
        except BrokerError as exc:
            why = f"INFO {section} failed: {_refused(exc)}"
    policy = None
    try:
        reply = run(Op(command=("CONFIG GET", "maxmemory-policy")))
        policy = reply.get("maxmemory-policy") if isinstance(reply, dict) else None
    except BrokerError as exc:
        why = why or f"CONFIG GET failed: {_refused(exc)}"
    if isinstance(policy, bytes):
        policy = policy.decode()
    if not policy and isinstance(info.get("maxmemory_policy"), str | bytes):
        value = info["maxmemory_policy"]
        policy = value.decode() if isinstance(value, bytes) else value
    if not policy and not why:
        why = "neither CONFIG GET nor INFO memory gave it"
    return info, policy or None, why
