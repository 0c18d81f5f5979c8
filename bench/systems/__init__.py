"""One adapter module per system; see bench/driver.py for the interface. A system's name is
its module's with ``-`` for ``_`` (blitzq-django is blitzq_django.py)."""

SYSTEMS = ("blitzq", "blitzq-def", "blitzq-fast", "blitzq-django", "blitzq-django-async",
           "celery", "rq", "dramatiq", "huey", "arq", "taskiq", "saq", "streaq")
# blitzq-fast is skipped (with its reason) where the broker has no fast mode: blitzq_fast.py.
