"""The test project with tests/fault/pool_app installed, for ``manage.py runworker``
pools (test_graceful_pools.py) and time limits (test_time_limits.py)."""

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import BLITZQ as PROJECT_BLITZQ
from testproject.settings import INSTALLED_APPS as PROJECT_APPS

INSTALLED_APPS = [*PROJECT_APPS, "tests.fault.pool_app"]
# PROCESSES: a setting of runworker's process count (the children must not read it as
# theirs); the history writer process and the outbox relay run as in a project.
BLITZQ = {**PROJECT_BLITZQ, "PROCESSES": int(os.environ.get("PROCESSES", "1"))}
