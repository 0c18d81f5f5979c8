"""The test project with small events streams (EVENTS_MAXLEN from the environment), for
the ``manage.py runworker`` processes of tests/fault/test_history_soak.py and
bench/history_soak.py."""

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import BLITZQ as PROJECT_BLITZQ

BLITZQ = {**PROJECT_BLITZQ, "EVENTS_MAXLEN": int(os.environ.get("EVENTS_MAXLEN", "100000"))}
if os.environ.get("EVENTS_HARD_MAXLEN"):
    BLITZQ["EVENTS_HARD_MAXLEN"] = int(os.environ["EVENTS_HARD_MAXLEN"])
