"""The test project with one schedule every 0.1 s, for ``manage.py runscheduler``
processes in tests/fault/test_scheduler_processes.py."""

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import BLITZQ as PROJECT_BLITZQ

BLITZQ = {**PROJECT_BLITZQ, "PERIODIC": {
    "fault.every-100ms": {"task": "testproject.shop.tasks.noop", "every": 0.1,
                          "missed": os.environ.get("MISSED", "run_all"), "grace": 0.05,
                          "queue": "default"},
}}
