"""The test project's settings as a new project has them: no LOGGING of its own, so the
long-running commands print blitzq's console log (management/logs.py), and
BLITZQ["LOG_FORMAT"] from $TEST_LOG_FORMAT (tests/django/test_observability.py)."""

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import BLITZQ

LOGGING: dict[str, object] = {}
BLITZQ = {**BLITZQ, "LOG_FORMAT": os.environ.get("TEST_LOG_FORMAT", "text")}
