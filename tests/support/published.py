"""Counting what is published on Redis channels, for tests of who publishes what."""

from __future__ import annotations

import redis


class Published:
    """Counts the messages published on ``channel`` (or on channels matching ``pattern``)
    since it was made; ``drain()`` reads what has arrived and returns the count."""

    def __init__(self, redis_url: str, *, channel: str | None = None,
                 pattern: str | None = None) -> None:
        self.plain = redis.Redis.from_url(redis_url)
        self.pubsub = self.plain.pubsub(ignore_subscribe_messages=True)
        if pattern is not None:
            self.pubsub.psubscribe(pattern)
        if channel is not None:
            self.pubsub.subscribe(channel)
        self.pubsub.get_message(timeout=1)  # the subscription's confirmation
        self.count = 0

    def drain(self) -> int:
        while self.pubsub.get_message(timeout=0.01) is not None:
            self.count += 1
        return self.count

    def close(self) -> None:
        self.pubsub.close()
        self.plain.close()
