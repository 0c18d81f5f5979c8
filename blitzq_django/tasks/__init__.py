"""Defining tasks: ``@blitzq_task`` (``decorators.py``) and the ``django.tasks`` backend
(``django_tasks.py``, with ``calls.py``, what it keeps of each call, and ``configured.py``,
whether settings.TASKS names it: read without importing ``django.tasks``)."""
