"""Enqueueing together with the database: after the commit (``on_commit.py``), in the
caller's transaction through the outbox (``outbox.py``), and task bodies whose database
writes commit at most once per message (``effects.py``). They import one way:
``on_commit`` uses ``outbox``; neither imports the task decorator."""

from .on_commit import DbOptions, TransactionalEnqueue, enqueue_on_commit

__all__ = ["DbOptions", "TransactionalEnqueue", "enqueue_on_commit"]
