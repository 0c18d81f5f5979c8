"""Keyspace: the only code that formats Redis key and channel names.

Every key of one queue carries the same hash tag ``{<ns>:<queue>}``, so each Lua
script touches one cluster slot and different queues may live on different nodes.

======================================  ========  =============================================
key                                     type      holds
======================================  ========  =============================================
``bq:{ns:queue}:s``                     stream    messages ready to run (reliable mode);
                                                  consumer group ``workers``
``bq:{ns:queue}:l``                     list      messages ready to run (fast mode)
``bq:{ns:queue}:z``                     zset      scheduled message ids (delayed, ETA, retry
                                                  backoff), scored by due time in ms
``bq:{ns:queue}:zd``                    hash      scheduled message id -> encoded message
``bq:{ns:queue}:dlq``                   zset      dead-letter ids scored by dead-letter time ms
``bq:{ns:queue}:dlqd``                  hash      dead-letter id -> encoded dead letter
``bq:{ns:queue}:r:<id>``                string    record of one message; TTL result_ttl
``bq:{ns:queue}:u:<key>``               string    idempotency key -> message id; TTL
``bq:{ns:queue}:done:<id>``             channel   published when a final record is written
``bq:{ns:queue}:k:<token>``             string    receipt of one settle batch (its reply); TTL
``bq:{ns}:workers``                     zset      worker registry: name -> expiry of its entry
``bq:{ns}:w:<name>``                    string    one worker's info (WorkerInfo); TTL
======================================  ========  =============================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.names import check_name

GROUP = "workers"
PREFIX = "bq"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Key names of one queue."""

    tag: str  # "bq:{ns:queue}"

    @property
    def stream(self) -> str:
        return f"{self.tag}:s"

    @property
    def list(self) -> str:
        return f"{self.tag}:l"

    @property
    def schedule(self) -> str:
        return f"{self.tag}:z"

    @property
    def schedule_data(self) -> str:
        return f"{self.tag}:zd"

    @property
    def dead_letters(self) -> str:
        return f"{self.tag}:dlq"

    @property
    def dead_letter_data(self) -> str:
        return f"{self.tag}:dlqd"

    def record(self, message_id: str) -> str:
        return f"{self.tag}:r:{message_id}"

    def unique(self, idempotency_key: str) -> str:
        return f"{self.tag}:u:{idempotency_key}"

    def done_channel(self, message_id: str) -> str:
        return f"{self.tag}:done:{message_id}"

    def receipt(self, token: str) -> str:
        return f"{self.tag}:k:{token}"


class Keyspace:
    def __init__(self, namespace: str) -> None:
        # Checked here, where names become keys: (ns "a", queue "b:c") must not share
        # keys with (ns "a:b", queue "c"), nor a brace break the hash tag.
        self.namespace = check_name("namespace", namespace)
        self._queues: dict[str, QueueKeys] = {}

    def queue(self, name: str) -> QueueKeys:
        keys = self._queues.get(name)
        if keys is None:
            check_name("queue", name)
            keys = self._queues[name] = QueueKeys(f"{PREFIX}:{{{self.namespace}:{name}}}")
        return keys

    @property
    def workers(self) -> str:
        return f"{PREFIX}:{{{self.namespace}}}:workers"

    def worker(self, name: str) -> str:
        return f"{PREFIX}:{{{self.namespace}}}:w:{name}"

    def all_keys_pattern(self) -> str:
        """Glob over every key of this namespace (for purge in tests and tools).

        ``bq:{ns:*`` and ``bq:{ns}:*`` but not ``bq:{ns2:...``: the namespace must end
        at ':' or '}'. Valid names hold no glob metacharacter; escaped all the same.
        """
        namespace = re.sub(r"([*?\[\]\\])", r"\\\1", self.namespace)
        return f"{PREFIX}:{{{namespace}[:}}]*"
