"""blitzq_django: a fast, reliable Redis task queue for Django."""

__version__ = "0.1.0"

