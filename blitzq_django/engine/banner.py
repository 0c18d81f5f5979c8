"""What a worker says when it starts: the queues it serves, its tasks, where Redis is,
its slots, the delivery mode (``runworker`` and the engine CLI; docs/observability.md).

One INFO record on ``blitzq.worker``, several lines long; its fields are also the
record's ``extra`` attributes (keys of a JSON log line).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .brokers.memory import MemoryBroker
from .brokers.redis.store import redact
from .client import Client
from .worker import supervision
from .worker.config import WorkerConfig

log = logging.getLogger("blitzq.worker")


def redis_location(client: Client) -> str:
    """Where the client's Redis is, its password masked; "memory" for the memory broker."""
    broker = client.broker
    if isinstance(broker, MemoryBroker):
        return "memory"
    url = getattr(broker, "url", None)
    return redact(url) if isinstance(url, str) else type(broker).__name__


def delivery_mode(client: Client, queues: Sequence[str]) -> str:
    """"reliable", "fast", "reliable; fast: bulk", or "memory (...)"."""
    broker = client.broker
    if isinstance(broker, MemoryBroker):
        return "memory: messages live in this process only, and are lost when it exits"
    mode_of = getattr(broker, "mode_of", None)
    if mode_of is None:
        return "unknown"
    main = getattr(broker, "mode", "reliable")
    others: dict[str, list[str]] = {}
    for queue in queues:
        mode = mode_of(queue)
        if mode != main:
            others.setdefault(mode, []).append(queue)
    return "; ".join([main, *(f"{mode}: {', '.join(qs)}" for mode, qs in others.items())])


def worker_banner(client: Client, config: WorkerConfig, name: str, *, processes: int = 1,
                  verbosity: int = 1, redis_source: str | None = None,
                  history: str | None = None, also: Sequence[str] = ()
                  ) -> tuple[str, dict[str, Any]]:
    """The banner's text and its fields."""
    queues = config.queues or tuple(sorted(client.known_queues()))
    specs = sorted(client.registry, key=lambda spec: spec.name)
    redis = redis_location(client)
    mode = delivery_mode(client, queues)
    threads = config.thread_count
    fields: dict[str, Any] = {
        "worker": name, "queues": list(queues), "tasks": len(specs), "redis": redis,
        "redis_source": redis_source, "mode": mode, "concurrency": config.concurrency,
        "threads": threads, "processes": processes, "history": history}
    if verbosity >= 2:
        fields["task_names"] = [spec.name for spec in specs]
        listed = "".join(f"\n    {spec.name} (queue {client.route(spec.name) or spec.queue})"
                         for spec in specs)
        tasks = f"{len(specs)} registered:{listed}"
    else:
        tasks = f"{len(specs)} registered (-v 2 lists them)" if specs else "none registered"
    where = f"{redis}, from {redis_source}" if redis_source else redis
    lines = [f"blitzq worker {name} starting",
             f"  queues:      {', '.join(queues)}",
             f"  tasks:       {tasks}",
             f"  redis:       {where}",
             f"  mode:        {mode}",
             f"  concurrency: {config.concurrency} per process, {threads} threads for def "
             f"tasks, {processes} process{'es' if processes != 1 else ''}"]
    if history is not None:
        lines.append(f"  history:     {history}")
    lines += [f"  {line}" for line in also]
    return "\n".join(lines), fields


def announce(client: Client, config: WorkerConfig, *, processes: int = 1,
             **options: Any) -> None:
    """Log the banner, once per command: not in the children of a supervising one."""
    if supervision.supervised():  # the supervisor announced the pool
        return
    name = config.name if processes == 1 else f"pool of {processes} processes"
    text, fields = worker_banner(client, config, name, processes=processes, **options)
    log.info("%s", text, extra=fields)


__all__ = ["announce", "delivery_mode", "redis_location", "worker_banner"]
