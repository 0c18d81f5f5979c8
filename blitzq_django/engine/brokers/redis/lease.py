"""The one lease (capabilities.Lease) on Redis: a key holding the holder's token with a
TTL, taken or renewed by lease_hold.lua and released by lease_release.lua, each one
atomic step comparing the token. Used by the history writer and the metrics folder."""

from __future__ import annotations

from typing import Any

from . import scripts
from .ops import Op


def hold(key: str, token: str, ttl_ms: int) -> Op:
    """Take ``key`` if free or renew it if ``token`` holds it: whether it does now."""
    return Op(script=scripts.LEASE_HOLD, keys=(key,), args=(token, ttl_ms), parse=bool)


def release(key: str, token: str) -> Op:
    """Delete ``key`` if ``token`` holds it: whether it did."""
    return Op(script=scripts.LEASE_RELEASE, keys=(key,), args=(token,), parse=bool)


class RedisLease:
    def __init__(self, broker: Any, queue: str, purpose: str, token: str,
                 ttl_ms: int) -> None:
        self._broker = broker
        self.key = broker.keys.queue(queue).lease(purpose)
        self.token, self.ttl_ms = token, ttl_ms

    def hold(self) -> bool:
        return bool(self._broker.sync.run(hold(self.key, self.token, self.ttl_ms)))

    def release(self) -> None:
        self._broker.sync.run(release(self.key, self.token))
