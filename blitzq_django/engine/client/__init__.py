"""The producer side: the ``Client`` façade and the services it composes.

``client.py`` builds messages and hands them to the broker; ``task.py`` is what a
decorated function becomes (``Task``, ``TaskHandle``, ``CallOptions``);
``dead_letters.py``, ``inspection.py`` and ``schedules.py`` are services that take
their collaborators (broker, registry, default queue...) from the ``Client``, which
composes them; ``context.py`` is what a running task sees (``current_task()``).
"""

from .client import CallOptions, Client, Task, TaskCancelled, TaskExpired, TaskFailed, TaskHandle

__all__ = ["CallOptions", "Client", "Task", "TaskCancelled", "TaskExpired", "TaskFailed",
           "TaskHandle"]
