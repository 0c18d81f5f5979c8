"""pytest fixtures for projects using blitzq_django, loaded by installing the package
(the ``pytest11`` entry point ``blitzq_django``; disable with ``-p no:blitzq_django``).

``blitzq``: every enqueue of the test goes to an in-memory broker and is recorded;
``blitzq.drain()`` runs what was enqueued with a real worker. ``blitzq_eager``: the
same, but each enqueue runs its task at once. See blitzq_django.testing.

Nothing is imported from Django or blitzq_django until a fixture is used, so the
plugin costs nothing in test runs that do not use it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .helpers import Blitzq


@pytest.fixture
def blitzq() -> Iterator[Blitzq]:
    """Record the test's enqueues in memory; run them with ``blitzq.drain()``."""
    from .helpers import Blitzq  # lazy: app loading (pytest-django configures Django later)

    with Blitzq() as helper:
        yield helper


@pytest.fixture
def blitzq_eager() -> Iterator[Blitzq]:
    """Like ``blitzq``, but each enqueue runs the task at once, in the caller; a failure
    is raised from ``enqueue()`` (set ``blitzq_eager.propagate = False`` to only record
    it: then the handle's ``result()`` raises TaskFailed)."""
    from .helpers import Blitzq  # lazy: app loading (pytest-django configures Django later)

    with Blitzq(eager=True) as helper:
        yield helper
