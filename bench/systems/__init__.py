"""One adapter module per system; see bench/driver.py for the interface."""

SYSTEMS = ("blitzq", "celery", "rq", "dramatiq", "huey", "arq", "taskiq", "saq", "streaq")
