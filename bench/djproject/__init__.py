"""A minimal Django project for bench/run.py's blitzq-django rows (settings.py, benchapp)."""
