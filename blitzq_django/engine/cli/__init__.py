"""The engine's command line: ``python -m blitzq_django.engine worker|scheduler|<op>``.

``main`` runs the worker and the scheduler and dispatches the rest to ``ops`` (the
operations commands, shared with Django's ``manage.py blitzq``); ``args`` holds the
argument types both use. The Django management commands reuse these parsers.
"""
