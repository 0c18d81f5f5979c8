"""The producer side: the ``Client`` façade and the services it composes.

``client.py`` builds messages and hands them to the broker; ``task.py`` is what a
decorated function becomes (``Task``, ``TaskHandle``, ``CallOptions``);
``dead_letters.py``, ``inspection.py`` and ``schedules.py`` are services that get their
collaborators (broker, registry, default queue...) from the ``Client``, which composes
them; ``context.py`` is what a running task sees (``current_task()``).

``TaskFailed``, ``TaskCancelled`` and ``TaskExpired`` live in engine/errors.py; they are
importable from here too, where docs/django.md names them.
"""

from ..errors import TaskCancelled, TaskExpired, TaskFailed
from .client import Client
from .task import CallOptions, Task, TaskHandle

__all__ = ["CallOptions", "Client", "Task", "TaskCancelled", "TaskExpired", "TaskFailed",
           "TaskHandle"]
